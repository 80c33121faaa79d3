"""workerscope.cli.main in this process: how errors become exit statuses, --version, and
what importing the CLI costs."""

from __future__ import annotations

import pytest

from workerscope import cli
from workerscope.cli import _common
from workerscope.errors import ConfigError, UsageError, WorkerscopeError


def failing(error: Exception):
    def run(args: object) -> int:
        raise error

    return run


def test_a_usage_error_exits_with_its_own_status(monkeypatch, capsys):
    """main() prints a UsageError as `workerscope: MESSAGE` on stderr and returns its exit_status."""
    monkeypatch.setattr(cli.report, "run", failing(UsageError("give a file", exit_status=64)))
    assert cli.main(["report", "x.wsc"]) == 64
    assert capsys.readouterr().err == "workerscope: give a file\n"


def test_a_usage_error_exits_2_by_default(monkeypatch, capsys):
    """A UsageError with no exit_status exits 2, as argparse does for a bad command line."""
    monkeypatch.setattr(cli.report, "run", failing(UsageError("no such thing")))
    assert cli.main(["report", "x.wsc"]) == 2
    assert capsys.readouterr().err == "workerscope: no such thing\n"


@pytest.mark.parametrize("error", [WorkerscopeError("broken"), ConfigError("broken")])
def test_other_workerscope_errors_exit_with_the_error_status(monkeypatch, capsys, error):
    """Any other WorkerscopeError is one line on stderr and exit status 2, no traceback."""
    monkeypatch.setattr(cli.report, "run", failing(error))
    assert cli.main(["report", "x.wsc"]) == _common.EXIT_ERROR == 2
    assert capsys.readouterr().err == "workerscope: broken\n"


def test_other_exceptions_are_not_swallowed(monkeypatch):
    """An exception that is not a WorkerscopeError is a bug: main() lets it through."""
    monkeypatch.setattr(cli.report, "run", failing(RuntimeError("bug")))
    with pytest.raises(RuntimeError, match="bug"):
        cli.main(["report", "x.wsc"])


def test_version_exits_0_after_printing(capsys):
    """main(["--version"]) prints `workerscope VERSION` on stdout and exits 0, as --help does."""
    import workerscope

    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code in (0, None)
    assert capsys.readouterr().out == f"workerscope {workerscope.__version__}\n"


def test_every_command_module_adds_its_own_subcommand():
    """The parser has one subcommand per command module, each dispatching to that module's run."""
    p = cli.parser()
    for module, argv in [(cli.run, ["run", "--", "true"]), (cli.attach, ["attach", "1"]),
                         (cli.listen, ["listen"]), (cli.report, ["report", "f.wsc"]),
                         (cli.demo, ["demo"])]:
        assert p.parse_args(argv).func is module.run


@pytest.mark.parametrize(("rc", "code"), [(0, 0), (3, 3), (-9, 137), (-15, 143)])
def test_shell_code_reads_a_signal_death_as_a_shell_does(rc, code):
    """A Popen return code of -N (killed by signal N) is reported as 128+N."""
    assert _common.shell_code(rc) == code


@pytest.mark.parametrize(("out", "partial"), [("t.json", "t.partial.wsc"),
                                              ("dir/t.html", "dir/t.partial.wsc"),
                                              ("t.partial.wsc", "t.partial.partial.wsc")])
def test_the_partial_record_lies_beside_the_output_and_never_on_it(out, partial):
    """The partial record is NAME.partial.wsc beside the output, and never the output itself."""
    assert _common.partial_path(out) == partial
