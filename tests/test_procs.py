"""procs.Failed: a worker's error carried to the parent, named in one line as before the
supervisors were merged (``Type: message``), whatever the exception's module or notes."""

from maple_async.errors import ConfigError
from maple_async.procs import Failed


def test_failed_names_the_error_in_one_line_without_module_or_notes():
    try:
        e = ConfigError("--sweep: expected name=v1,v2")
        e.add_note("while reading the config")
        raise e
    except ConfigError:
        f = Failed.now(who=0)
    assert f.last_line == "ConfigError: --sweep: expected name=v1,v2"
    assert "Traceback" in f.traceback and "while reading the config" in f.traceback and f.who == 0


def test_a_failed_built_from_a_traceback_alone_reads_its_last_line():
    assert Failed("Traceback ...\nValueError: bad\n").last_line == "ValueError: bad"
    assert Failed("").last_line == ""
