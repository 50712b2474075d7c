"""Every command refuses every bad run parameter the same way: exit code 2, one line on
stderr starting `abcast: error: `, no traceback, nothing run — NaN, infinities,
negative, zero where zero makes no sense, not a number, out of range; output
directories that cannot be one; names, transports, URLs and Spark masters that are
not. One parametrised test over all commands (abcast.cli_params is the one validator);
in process, so a hundred-odd cases take seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from abcast.cli import main
from abcast.group.failure_detector import DetectorConfig
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import OptimisticConfig

REGISTRY = "tcp://127.0.0.1:9"

#: command -> (the arguments that make the rest valid, {option: accepts zero})
COMMANDS: dict[str, tuple[list[str], dict[str, bool]]] = {
    "sim": (["--ordering", "fifo", "--out", "{tmp}"],
            {"--nodes": False, "--messages": True, "--seed": True, "--payload": True,
             "--rate": False, "--batch": False, "--suspect-after": False,
             "--opt-alpha": True}),
    "cluster": (["--ordering", "fifo", "--out", "{tmp}"],
                {"--nodes": False, "--messages": True, "--payload": True, "--rate": False,
                 "--busy-poll": True, "--batch": False, "--suspect-after": False,
                 "--timeout": False}),
    "node": (["--registry", REGISTRY, "--ordering", "fifo", "--size", "1", "--messages", "1"],
             {"--size": False, "--messages": True, "--payload": True, "--rate": False,
              "--batch": False, "--suspect-after": False}),
    "registry": ([], {"--recovery-grace": True}),
    "group create": (["g", "--registry", REGISTRY, "--ordering", "fifo"],
                     {"--timeout": False, "--batch": False, "--suspect-after": False}),
    "group join": (["g", "--registry", REGISTRY], {"--timeout": False}),
    "group list": (["--registry", REGISTRY], {"--timeout": False}),
    "group members": (["g", "--registry", REGISTRY], {"--timeout": False}),
    "group remove": (["g", "--registry", REGISTRY], {"--timeout": False}),
    "demo bank": ([], {"--nodes": False, "--operations": True, "--seed": True,
                       "--heartbeat-ms": False, "--timeout": False}),
}

ALWAYS_BAD = ("nan", "-1", "inf", "-inf", "ten", "1e999")


def _numeric_cases() -> list[object]:
    cases = []
    for command, (_, options) in COMMANDS.items():
        for option, zero_ok in options.items():
            for value in ALWAYS_BAD + (() if zero_ok else ("0",)):
                cases.append(pytest.param(command, option, value,
                                          id=f"{command}-{option}={value}"))
    return cases


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(sys, "argv", ["abcast", *argv])
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    assert exit_.value.code == 2, (argv, out, err)
    assert "Traceback" not in err
    assert err.startswith("abcast: error: ") and err.count("\n") == 1, err
    return err


def _argv(command: str, tmp_path: Path, *extra: str) -> list[str]:
    base = [a.replace("{tmp}", str(tmp_path / "out")) for a in COMMANDS[command][0]]
    return [*command.split(), *base, *extra]


@pytest.mark.parametrize(("command", "option", "value"), _numeric_cases())
def test_a_bad_number_is_refused_in_one_line(
    command: str, option: str, value: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = _refused(_argv(command, tmp_path, option, value), capsys, monkeypatch)
    assert option in err
    assert not (tmp_path / "out").exists()  # nothing ran


def _out_cases(tmp_path: Path) -> dict[str, str]:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    return {"empty": "", "under a file": str(a_file / "sub"), "a file": str(a_file),
            "/dev/null": "/dev/null"}


@pytest.mark.parametrize("where", ["empty", "under a file", "a file", "/dev/null"])
@pytest.mark.parametrize("command", ["sim", "cluster", "node", "report", "bench"])
def test_an_output_directory_that_cannot_be_one_is_refused(
    command: str, where: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = _out_cases(tmp_path)[where]
    argv = {"report": ["report", str(tmp_path), "--out", bad],
            "bench": ["bench", "--quick", "--out", bad]}.get(command)
    if argv is None:
        argv = _argv(command, tmp_path, "--out", bad)
    err = _refused(argv, capsys, monkeypatch)
    assert "--out" in err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["cluster", "--ordering", "fifo", "--out", "{tmp}", "--registry", "http://x"],
         "tcp://127.0.0.1:7400"),
        (["cluster", "--ordering", "fifo", "--out", "{tmp}", "--transport", "carrier"],
         "not a transport"),
        (["cluster", "--ordering", "fifo", "--out", "{tmp}", "--payload", "20000000"],
         "more than"),
        (["node", "--registry", REGISTRY, "--ordering", "fifo", "--size", "1",
          "--messages", "1", "--safe"], "no safe mode"),
        (["node", "--registry", REGISTRY, "--ordering", "fifo", "--size", "1",
          "--messages", "1", "--node", "bad name"], "not a name"),
        (["sim", "--ordering", "fifo", "--out", "{tmp}", "--seed", str(10**24)], "more than"),
        (["sim", "--ordering", "skeen", "--out", "{tmp}", "--relay"], "no sequencer"),
        (["sim", "--ordering", "fifo", "--out", "{tmp}", "--bogus"], "No such option"),
        (["group", "create", "a b", "--registry", REGISTRY, "--ordering", "fifo"],
         "not a name"),
        (["group", "join", "chat", "--registry", REGISTRY, "--transport", "sctp://x:1"],
         "not a transport"),
        (["check", "{tmp}", "--master", "bogus://x"], "not a Spark master"),
        (["report", "{tmp}", "--out", "{tmp}", "--master", "nowhere"], "not a Spark master"),
        (["bench", "--master", "bogus://x"], "not a Spark master"),
        (["registry", "--group", "chat=0"], "not at least 1"),
        (["registry", "--group", "chat"], "NAME=SIZE"),
        (["registry", "--group", "chat=\u00b2"], "not an integer"),
        (["registry", "--group", "chat=100000"], "more than 65536"),
        (["registry", "--group", "a b=3"], "not a name"),
        (["sim", "--ordering", "fifo", "--out", "{tmp}", "--opt-alpha", "0.5"],
         "for ordering 'optimistic'"),
        (["sim", "--ordering", "sequencer", "--out", "{tmp}", "--no-opt-compensate"],
         "for ordering 'optimistic'"),
        (["sim", "--ordering", "optimistic", "--out", "{tmp}", "--opt-alpha", "1"],
         "alpha must be in [0, 1)"),
        (["sim", "--ordering", "fifo", "--out", "{tmp}", "--ticket", "tcp://127.0.0.1:1"],
         "for ordering 'ticket'"),
        (["demo", "bank", "--transport", "carrier"], "not a transport"),
    ],
)
def test_other_bad_arguments_are_refused_in_one_line(
    argv: list[str], says: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    err = _refused([a.replace("{tmp}", str(tmp_path)) for a in argv], capsys, monkeypatch)
    assert says in err


@pytest.mark.parametrize("command", [c.split() for c in COMMANDS] + [["check"], ["report"],
                                                                      ["bench"]],
                         ids=" ".join)
def test_every_option_has_help(command: list[str], capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    import click

    from abcast.cli import cli

    ctx = click.Context(cli)
    target: click.Command = cli
    for word in command:
        assert isinstance(target, click.Group)
        found = target.get_command(ctx, word)
        assert found is not None
        target = found
    missing = [p.name for p in target.params
               if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert missing == []


#: what group_options makes of --suspect-after 2000
_DETECTOR = DetectorConfig(period_us=DetectorConfig().period_us, timeout_us=2_000_000)


@pytest.mark.parametrize(
    ("ordering", "wanted"),
    [
        ("fifo", OrderingOptions(detector=_DETECTOR)),
        ("sequencer", OrderingOptions(batch=4, safe=True, relay=True, order_interval_ms=2.5,
                                      detector=_DETECTOR)),
        ("sequencer", OrderingOptions(multicast="basic", partitions="evs",
                                      detector=_DETECTOR)),
        ("sequencer", OrderingOptions(multicast="reliable", detector=_DETECTOR)),
        ("optimistic", OrderingOptions(optimistic=OptimisticConfig(alpha=0.5),
                                       detector=_DETECTOR)),
        ("optimistic", OrderingOptions(optimistic=OptimisticConfig(compensate=False),
                                       detector=_DETECTOR)),
        ("ticket", OrderingOptions(ticket="tcp://127.0.0.1:7500", detector=_DETECTOR)),
    ],
)
def test_the_flags_a_launcher_passes_give_the_options_back(
    ordering: str, wanted: OrderingOptions
) -> None:
    """ordering_argv is group_options' inverse: a node started with the flags the cluster
    launcher derives from OrderingOptions runs with those options."""
    import click

    from abcast.cli_params import GroupFlags, group_options, ordering_argv, ordering_options

    got: list[OrderingOptions] = []

    @click.command()
    @ordering_options()
    def node(flags: GroupFlags) -> None:
        got.append(group_options(ordering, flags))

    node.main(ordering_argv(wanted), standalone_mode=False)
    assert got == [wanted]


@pytest.mark.parametrize(("given", "udp", "tcp"), [
    (None, "nak", None),  # the transport's default
    ("reliable", "reliable", "reliable"),  # given on purpose: kept over udp:// too
    ("basic", "basic", "basic"),
])
def test_the_channel_over_udp_is_nak_unless_one_was_given(
        given: str | None, udp: str | None, tcp: str | None) -> None:
    from abcast.runtime.group import for_streams

    options = OrderingOptions(multicast=given)
    assert for_streams(options, "udp").multicast == udp
    assert for_streams(options, "tcp").multicast == tcp
