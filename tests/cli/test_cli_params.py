"""Every command refuses every bad run parameter the same way: exit code 2, one line on
stderr starting `abcast: error: `, no traceback, nothing run — NaN, infinities,
negative, zero where zero makes no sense, not a number, below or above its bounds;
output directories that cannot be one; names, transports, URLs and Spark masters that
are not. The commands come from the click tree (a new one fails
`test_every_command_is_covered` until it is listed) and each one's numeric options
from its parameters' types, so no option is left out by hand; every parameter's type
is one of abcast.cli_params' (one validator per parameter). In process: some four
hundred cases take seconds."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pytest

from abcast.cli import main
from abcast.cli_params import Number
from abcast.group.failure_detector import DetectorConfig
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import OptimisticConfig

REGISTRY = "tcp://127.0.0.1:9"

#: every command in the click tree -> the arguments that make the rest of a run valid
#: (`test_every_command_is_covered` fails when a new command is not here)
COMMANDS: dict[str, list[str]] = {
    "sim": ["--ordering", "fifo", "--out", "{tmp}"],
    "cluster": ["--ordering", "fifo", "--out", "{tmp}"],
    "node": ["--registry", REGISTRY, "--ordering", "fifo", "--size", "1", "--messages", "1"],
    "registry": [],
    "group create": ["g", "--registry", REGISTRY, "--ordering", "fifo"],
    "group join": ["g", "--registry", REGISTRY],
    "group list": ["--registry", REGISTRY],
    "group members": ["g", "--registry", REGISTRY],
    "group remove": ["g", "--registry", REGISTRY],
    "demo bank": [],
    "demo certify": [],
    "demo chat": [],
    "call": ["g", "x", "--registry", REGISTRY],
    "serve": ["g", "--registry", REGISTRY],
    "ticket-server": ["--registry", REGISTRY, "--group", "g"],
    "bench": ["--quick", "--out", "{tmp}"],
    "check": ["{tmp}"],
    "report": ["{tmp}", "--out", "{tmp}"],
    "probe": [],
}
#: commands no user types (started by another command, with arguments it derived)
INTERNAL: dict[str, str] = {"demo bank-node": "started by `demo bank` only"}
#: parameters that are free text, parsed (and refused in one line) by the command itself
FREE_TEXT: dict[tuple[str, str], str] = {
    ("sim", "faults"): "the fault grammar (abcast.sim.faults)",
    ("call", "payload"): "the request's bytes",
    ("call", "vote"): "the vote grammar (abcast.rpc.voting)",
    ("call", "to"): "server ids, comma-separated",
    ("check", "trace_dir"): "a trace directory or a remote URL",
    ("check", "remote"): "an object-store URL",
    ("report", "trace_dir"): "a trace directory or a remote URL",
    ("report", "remote"): "an object-store URL",
    ("node", "metrics_host"): "a host name or address",
    ("probe", "nodes"): "node ids or socket paths",
}
#: parameters whose own engineer is changing them this session (not ours to type)
ELSEWHERE: dict[tuple[str, str], str] = {
    ("demo chat", "host"): "chatfix", ("demo chat", "port"): "chatfix",
    ("demo chat", "registry_url"): "chatfix", ("demo chat", "transport"): "chatfix",
}

ALWAYS_BAD = ("nan", "-1", "inf", "-inf", "ten", "1e999")


def _leaves() -> dict[str, click.Command]:
    """Every command of the click tree, by its path ("group create")."""
    from abcast.cli import cli

    ctx = click.Context(cli)
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, (*path, name))
        else:
            found[" ".join(path)] = command

    walk(cli, ())
    return found


def _out_of_range(number: Number) -> tuple[str, ...]:
    """Values just outside the type's bounds, both ends."""
    whole = number.kind is int
    low: tuple[str, ...] = ()
    if number.low is not None:
        if number.low_open:
            low = (f"{number.low:g}",)
        elif number.low != 0:  # below 0 is ALWAYS_BAD's -1
            low = (str(int(number.low) - 1) if whole else f"{number.low / 10:g}",)
    high: tuple[str, ...] = ()
    if number.high is not None:
        high = (str(int(number.high) + 1) if whole else f"{number.high * 1.5:g}",)
    return low + high


def _numeric_cases() -> list[object]:
    """Every Number-typed option of every command in the tree: the values any number
    refuses, and just below and just above its bounds."""
    cases = []
    for command, target in _leaves().items():
        if command in INTERNAL:
            continue
        for param in target.params:
            if not isinstance(param, click.Option) or not isinstance(param.type, Number):
                continue
            option = max(param.opts, key=len)
            for value in dict.fromkeys(ALWAYS_BAD + _out_of_range(param.type)):
                cases.append(pytest.param(command, option, value,
                                          id=f"{command}-{option}={value}"))
    return cases


def test_every_command_is_covered() -> None:
    """A new command must be added to COMMANDS (or INTERNAL): then its numbers are
    tested below without anyone listing them."""
    assert set(_leaves()) == set(COMMANDS) | set(INTERNAL)


@pytest.mark.parametrize("command", sorted(set(COMMANDS)))
def test_every_parameter_has_a_shared_type(command: str) -> None:
    """One validator per parameter: each run parameter's type comes from
    abcast.cli_params (or is a choice, a path, a flag), never click's bare int, float,
    range or string, which let NaN, '²' or no bound at all through."""
    loose = []
    for param in _leaves()[command].params:
        if isinstance(param, click.Option) and param.is_flag:
            continue
        kind = param.type
        if isinstance(kind, (click.Choice, click.Path)):
            continue
        if type(kind).__module__ == "abcast.cli_params" or (command, param.name) in (
                FREE_TEXT.keys() | ELSEWHERE.keys()):
            continue
        loose.append(f"{param.name}: {kind!r}")
    assert loose == []


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
    base = [a.replace("{tmp}", str(tmp_path / "out")) for a in COMMANDS[command]]
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


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help(command: str) -> None:
    missing = [p.name for p in _leaves()[command].params
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
    from abcast.runtime.stack_options import for_streams

    options = OrderingOptions(multicast=given)
    assert for_streams(options, "udp").multicast == udp
    assert for_streams(options, "tcp").multicast == tcp


def test_the_bounds_are_where_the_protocol_defines_them() -> None:
    """--batch ends at what an order packet carries, a group's size at what the
    registry's wire carries, on every command that takes them (not a copied number:
    a bound that drifts from the wire is a run that fails later, with a traceback)."""
    from typing import get_args

    from abcast.ordering.sequencer_wire import MAX_ORDER_IDS
    from abcast.registry.messages import Size

    wire_size = next(m.le for m in get_args(Size)[1:] if getattr(m, "le", None))
    bounds = {"--batch": MAX_ORDER_IDS, "--size": wire_size}
    seen = set()
    for command, target in _leaves().items():
        for param in target.params:
            option = max(getattr(param, "opts", [""]), key=len)
            if option in bounds and command not in INTERNAL:
                assert isinstance(param.type, Number), (command, option)
                assert param.type.high == bounds[option], (command, option)
                seen.add(option)
    assert seen == set(bounds)
    from abcast.cli_params import GROUP_SIZE

    assert GROUP_SIZE.high == wire_size  # registry --group NAME=SIZE
