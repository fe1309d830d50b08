"""Launch configurations of Megatron-LM, torchtitan and DeepSpeed: pinned schemas, checks, readers.

* :mod:`paraplan.launch.schema` -- the vendored schemas (Megatron-LM d98e8a64, torchtitan 0.3.0
  and v0.2.2, DeepSpeed 0.19.8, Megatron-DeepSpeed 6acc370a) and ``check_megatron`` /
  ``check_torchtitan`` / ``check_torchtitan_toml`` / ``check_deepspeed`` /
  ``check_megatron_deepspeed``;
* :mod:`paraplan.launch.readers` -- ``read_launch`` and friends: a user's existing launch file
  (bash script, argument list, torchtitan command line or TOML, DeepSpeed JSON) to
  :class:`LaunchSettings`;
* :mod:`paraplan.launch.convert` -- ``torchtitan_toml_to_flags``: a v0.2.2 TOML as 0.3.0 flags;
* :mod:`paraplan.launch.shell` -- the static bash-subset reader they use (never executes anything).
"""

from .convert import TitanConversion, torchtitan_toml_to_flags
from .readers import (
    MAX_BYTES,
    Framework,
    LaunchSettings,
    detect_framework,
    parse_launch_text,
    read_deepspeed,
    read_launch,
    read_megatron,
    read_torchtitan,
)
from .schema import (
    DEEPSPEED_VERSION,
    MEGATRON_COMMIT,
    MEGATRON_DEEPSPEED_COMMIT,
    TORCHTITAN_TOML_VERSION,
    TORCHTITAN_VERSION,
    check_deepspeed,
    check_megatron,
    check_megatron_deepspeed,
    check_torchtitan,
    check_torchtitan_toml,
    load_schema,
)

__all__ = [
    "DEEPSPEED_VERSION",
    "MAX_BYTES",
    "MEGATRON_COMMIT",
    "MEGATRON_DEEPSPEED_COMMIT",
    "TORCHTITAN_TOML_VERSION",
    "TORCHTITAN_VERSION",
    "Framework",
    "LaunchSettings",
    "TitanConversion",
    "check_deepspeed",
    "check_megatron",
    "check_megatron_deepspeed",
    "check_torchtitan",
    "check_torchtitan_toml",
    "detect_framework",
    "load_schema",
    "parse_launch_text",
    "read_deepspeed",
    "read_launch",
    "read_megatron",
    "read_torchtitan",
    "torchtitan_toml_to_flags",
]
