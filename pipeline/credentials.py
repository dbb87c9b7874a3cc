"""Credentials a log may print (API keys, tokens, passwords), masked wherever text leaves `log_lines`.

`log_lines` keeps every line as it was read; what is derived from it (a table's text column, the config
in `runs.config_json`, a report, a mail, a Dagster event) carries `mask_secrets` of the text instead.
The patterns are read by Python's `re` and by RE2 (DuckDB's `regexp_replace`, the `mask_secrets` macro
that `sql_macro` defines), so they use neither look-arounds nor back-references.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
# a key whose value is a credential: an environment-style `*_KEY`, `*_TOKEN`, `*_SECRET` (WANDB_API_KEY, HF_TOKEN)
# or a name no setting but a credential has, in any case (api_key, access_token, hf_token, client_secret,
# password). Not any lowercase `*_key` / `*_token`: verl's config names columns and tokens so (prompt_key,
# reward_fn_key, pad_token).
_KEY = (r"(\b[A-Z0-9_]*_(?:KEY|TOKEN|SECRET)\b|(?i:\b[a-z0-9_.-]*(?:api_key|secret_key|access_key|private_key"
        r"|_secret|access_token|auth_token|api_token|hf_token|password|passwd)\b))")
# (pattern, replacement), applied in this order
SECRET_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bhf_[A-Za-z0-9]{30,}", "hf_" + MASK),  # Hugging Face token
    (r"\bsk-[A-Za-z0-9-]{20,}", "sk-" + MASK),  # OpenAI-style secret key
    (r"\bAKIA[0-9A-Z]{16}", "AKIA" + MASK),  # AWS access key id
    # a W&B API key (40 hex digits) after its name, whatever separates them
    (r"(?i)(\b(?:WANDB_)?API_KEY\W{1,4})[0-9a-f]{40}\b", r"\1" + MASK),
    (_KEY + r"""(['"]?\s*[:=]\s*)(['"])[^'"]*""", r"\1\2\3" + MASK),  # key: 'value', "key": "value"
    (_KEY + r"""(\s*[:=]\s*)[^\s'",;)}\]]+""", r"\1\2" + MASK),  # key=value, key: value
)
# what every pattern's match contains: text without it is passed on untouched, unsearched
_HINT = r"(?i)hf_|sk-|AKIA|key|token|secret|passw"
_COMPILED = tuple((re.compile(p), r) for p, r in SECRET_PATTERNS)
_HINTED = re.compile(_HINT)
_CREDENTIAL_KEY = re.compile(_KEY + "$")


def mask_secrets(text: str | None) -> str | None:
    """`text` with every credential the patterns know replaced by `***` (None stays None)."""
    if not text or not _HINTED.search(text):
        return text
    for pattern, replacement in _COMPILED:
        text = pattern.sub(replacement, text)
    return text


def mask_config(value: Any) -> Any:
    """A parsed config (dicts, lists, scalars) with the value of every credential key masked and every string
    passed through `mask_secrets`: the JSON written from it stays valid JSON."""
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _CREDENTIAL_KEY.match(k) and v not in (None, "")
                else mask_config(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_config(v) for v in value]
    return mask_secrets(value) if isinstance(value, str) else value


def sql_macro() -> str:
    """DDL of the DuckDB macro `mask_secrets(text)`: the same patterns, applied in the same order."""
    expr = "text"
    for pattern, replacement in SECRET_PATTERNS:
        expr = f"regexp_replace({expr}, {_sql_string(pattern)}, {_sql_string(replacement)}, 'g')"
    return (f"create or replace temp macro mask_secrets(text) as "
            f"case when regexp_matches(text, {_sql_string(_HINT)}) then {expr} else text end")


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
