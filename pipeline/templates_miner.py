"""Error and warning messages mined into templates with Drain3: the variable parts become `<*>`.

Masks first (what is variable whatever the line: addresses, paths, ids, numbers), then Drain3's
clustering finds the words that vary among lines of one shape. Pure: messages in, templates out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

WILDCARD = "<*>"
# In order: each mask replaces what it matches with <*> before the next one looks. Beside each pattern, the
# texts one of which every match holds (empty: no such text): a message holding none of them is passed on
# unread, as the pattern would leave it (of a 1,000-run fleet's 1,274 message shapes, 4 hold a URL, 366 a path).
MASKS = (
    # Ray/object ids, hashes and uuids: long hex runs
    (r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", ("-",)),
    (r"\b0x[0-9a-fA-F]+\b", ("0x",)),
    (r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{12,}\b", ()),
    # a date and time of day, together one wildcard
    (r"\b\d{4}-\d\d-\d\d(?:[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?\b"
     r"|\b\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\b|\b\d\d:\d\d:\d\d(?:[.,]\d+)?\b", ("-", ":")),
    # host:port and IPv4/IPv6 addresses
    (r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b", (".",)),
    (r"\[?(?:[0-9a-fA-F]{1,4}:){2,7}[0-9a-fA-F]{1,4}\]?(?::\d+)?", (":",)),
    # file system paths (at least two components) and URLs
    (r"[a-zA-Z][\w+.-]*://\S+", ("://",)),
    (r"(?<![\w<])~?(?:/[\w.@+-]+){2,}/?|(?<![\w/<])[\w.-]+(?:/[\w.@+-]+){2,}/?", ("/",)),
    # numbers, also inside a word (rank3, E0718): with a sign, decimals and exponent
    (r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:[eE][-+]?\d+)?|\d+", ()),
)


class GuardedMask(MaskingInstruction):
    """Drain3's regex mask, which reads a message only when it holds one of `needs` (or always, with none)."""

    def __init__(self, pattern: str, needs: tuple[str, ...]):
        super().__init__(pattern, "*")
        self.needs = needs

    def skips(self, content: str) -> bool:
        """Whether `content` holds none of the texts every match needs, so the pattern cannot match it."""
        return bool(self.needs) and not any(need in content for need in self.needs)

    def mask(self, content: str, mask_prefix: str, mask_suffix: str) -> str:
        """`content` with every match of the pattern replaced by the mask."""
        return content if self.skips(content) else super().mask(content, mask_prefix, mask_suffix)


SIMILARITY = 0.5  # Drain's share of equal tokens for a line to join a template (its default is 0.4)
DEPTH = 4


def _config() -> TemplateMinerConfig:
    config = TemplateMinerConfig()
    config.masking_instructions = [GuardedMask(pattern, needs) for pattern, needs in MASKS]
    config.mask_prefix, config.mask_suffix = "<", ">"
    config.drain_sim_th = SIMILARITY
    config.drain_depth = DEPTH
    config.parametrize_numeric_tokens = True
    return config


def mine_templates(messages: Iterable[str]) -> list[str]:
    """The template of each message, as Drain3 leaves it after seeing all of them (order matters little:
    a template only widens as lines join it, and every line gets its template's final form)."""
    miner = TemplateMiner(config=_config())
    cluster_ids = [miner.add_log_message(_clean(m))["cluster_id"] for m in messages]
    final = {cid: _tidy(c.get_template()) for cid, c in miner.drain.id_to_cluster.items()}
    return [final[cid] for cid in cluster_ids]


RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
# Drain3's masks take time quadratic in a token's length (10,000 characters 0.7 s, 40,000 12 s): a template
# is read from a message's start, so the miner sees that much of it (the real logs' longest: 4,328)
MINED_CHARS = 5000


def _clean(message: str) -> str:
    """The message's start without surrounding blanks nor Ray's de-duplication note; an empty one stays itself."""
    return RAY_REPEATED.sub("", message[: MINED_CHARS + 100]).strip()[:MINED_CHARS] or "(empty)"


def _tidy(template: str) -> str:
    """Adjacent wildcards of one token merged (`<*><*>` -> `<*>`)."""
    return re.sub(r"(?:<\*>){2,}", WILDCARD, template)
