"""``maple-async`` command line: server, play, train, pretrain, eval, bench, serve, ladder, curve,
report, engine.

``parser`` holds the flags, ``commands`` one function per command that calls into ``tools/``.
"""

from .commands import COMMANDS, eval_config, main, outside_config  # noqa: F401
from .commands import outside_config as _outside_config  # noqa: F401 - its name before the split
from .parser import build_parser, load_config  # noqa: F401
