"""verl-health: offline health analysis of verl RL post-training runs from their logs."""

import os

# Arrow's allocator (mimalloc) gives the pages a batch freed back at once instead of keeping them for later
# batches: ingest of a 306 MB real log held 790-870 MB that way, 580-590 MB with them given back (its Arrow
# allocations never pass 230 MB). mimalloc reads it when pyarrow loads, so it is set before any module of the
# package imports pyarrow; a value the environment already sets wins.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "0")
