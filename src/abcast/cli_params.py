"""The command line's parameter types and its one error format, shared by every command
(abcast.cli, abcast.apps, abcast.evaluation.cli, abcast.pipeline.commands and whatever
command comes next).

Rules: every run parameter is declared with one of these types, so a bad value — not a
number, NaN, infinite, negative or zero where that makes no sense, out of range, a name
the registry would refuse, an output directory that cannot be one — is refused while
the arguments are parsed, before anything runs. Every refusal, click's own included, is
one line on stderr, `abcast: error: <what> (see 'abcast <command> --help')` when it is
about the arguments, and exit code 2 (EXIT_USAGE); `fail()` is that line for a refusal
found later (a ConfigError from the library). No traceback reaches the user for a bad
argument.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar, cast

import click

from abcast.ids import MAX_GROUP_SIZE
from abcast.ordering.sequencer_wire import MAX_ORDER_IDS

if TYPE_CHECKING:
    from abcast.ordering.registry import OrderingOptions

EXIT_USAGE: Final = 2
PREFIX: Final = "abcast: error: "

#: node and group names the registry, the trace and a terminal all take as they are
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
#: seeds are stored as int64 in runs.parquet
MAX_SEED: Final = 2**63 - 1


def fail(message: str) -> NoReturn:
    """The one error line on stderr, exit code 2."""
    click.echo(f"{PREFIX}{message}", err=True)
    sys.exit(EXIT_USAGE)


def usage_error(exc: click.ClickException) -> NoReturn:
    """A click refusal (bad value, missing or unknown option) in the one format."""
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    fail(message)


class Number(click.ParamType[Any]):
    """An int or a finite float within bounds; NaN and infinities are refused."""

    def __init__(
        self, kind: type[int] | type[float], *, low: float | None = None,
        high: float | None = None, low_open: bool = False, what: str = "",
    ) -> None:
        self.kind = kind
        self.low, self.high, self.low_open = low, high, low_open
        self.name = what or ("integer" if kind is int else "number")

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, self.kind) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            try:
                number = int(text, 10) if self.kind is int else float(text)
            except ValueError:
                self.fail(f"{value!r} is not {'an integer' if self.kind is int else 'a number'}",
                          param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.low is not None and (number <= self.low if self.low_open else number < self.low):
            bound = f"greater than {self.low:g}" if self.low_open else f"at least {self.low:g}"
            self.fail(f"{value!r} is not {bound}", param, ctx)
        if self.high is not None and number > self.high:
            self.fail(f"{value!r} is more than {self.high:g}", param, ctx)
        return number

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return self.name.upper().replace(" ", "_")


def count(low: int = 0, high: int | None = None, what: str = "integer") -> Number:
    """An integer in [low, high]."""
    return Number(int, low=low, high=high, what=what)


#: positive, finite seconds (timeouts, durations)
SECONDS: Final = Number(float, low=0, low_open=True, what="seconds")
#: zero or more finite seconds (grace periods)
SECONDS_OR_ZERO: Final = Number(float, low=0, what="seconds")
#: positive, finite milliseconds
MILLISECONDS: Final = Number(float, low=0, low_open=True, what="ms")
#: broadcasts per second over the whole group (open loop): positive and finite
RATE: Final = Number(float, low=0, low_open=True, what="rate")


class Duration(Number):
    """Positive, finite seconds, spelt `2`, `1.5s` or `500ms` (converts to seconds)."""

    def __init__(self) -> None:
        super().__init__(float, low=0, low_open=True, what="duration")

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return super().convert(value, param, ctx)
        text = str(value).strip().lower()
        scale = 1e-3 if text.endswith("ms") else 1.0
        number = text.removesuffix("ms") if scale != 1.0 else text.removesuffix("s")
        if number != text and not number.strip():
            self.fail(f"{value!r} is not a duration (e.g. 2, 1.5s, 500ms)", param, ctx)
        seconds = super().convert(number, param, ctx) * scale
        if not seconds > 0:  # 1e-400ms: positive as written, nothing once scaled
            self.fail(f"{value!r} is not greater than 0", param, ctx)
        return seconds


#: positive, finite seconds with an optional unit: 2, 1.5s, 500ms
DURATION: Final = Duration()
#: a simulation or workload seed
SEED: Final = count(0, MAX_SEED, "seed")
#: a TCP port (0: any free one)
PORT: Final = count(0, 65_535, "port")
#: payload bytes per message: 4 MiB keeps every frame that carries one (a relayed
#: order, a retransmission with its headers) under the transports' 16 MiB frame limit
PAYLOAD: Final = count(0, 4 * 1024 * 1024, "bytes")


class Name(click.ParamType[str]):
    """A node or group name: a letter or digit, then letters, digits, `_ . : -`."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value)
        if NAME_PATTERN.fullmatch(text) is None:
            self.fail(f"{text!r} is not a name (1-128 letters, digits or _ . : -, "
                      "starting with a letter or digit)", param, ctx)
        return text


NAME: Final = Name()


class RegistryUrl(click.ParamType[str]):
    """A registry's address, tcp://host:port, checked before anything starts."""

    name = "url"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        from abcast.errors import AbcastError
        from abcast.registry import parse_registry_url

        try:
            parse_registry_url(str(value))
        except AbcastError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


REGISTRY_URL: Final = RegistryUrl()

#: a group's declared size: at most what the registry's wire carries (abcast.ids)
GROUP_SIZE: Final = count(1, MAX_GROUP_SIZE, "size")


class NameSize(click.ParamType[tuple[str, int]]):
    """NAME=SIZE: a NAME and a GROUP_SIZE, each checked by its own validator."""

    name = "name=size"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[str, int]:
        if isinstance(value, tuple):
            return cast(tuple[str, int], value)
        name, equals, size = str(value).partition("=")
        if not equals:
            self.fail(f"{str(value)!r} is not NAME=SIZE", param, ctx)
        return NAME.convert(name, param, ctx), GROUP_SIZE.convert(size, param, ctx)


NAME_SIZE: Final = NameSize()


class OutDir(click.ParamType[Path]):
    """A directory the command may write into: an existing writable directory, or a path
    whose nearest existing parent is one (created when the command writes). Refused at
    parse time: "", a file, a path under a file, /dev/null, an unwritable place."""

    name = "directory"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Path:
        text = str(value)
        if not text.strip():
            self.fail("an empty path is not a directory", param, ctx)
        path = Path(text).expanduser()
        probe = path
        while not probe.exists():
            if probe.parent == probe:
                break
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            where = "is" if probe == path else f"is under {str(probe)!r}, which is"
            self.fail(f"{text!r} {where} not a directory", param, ctx)
        if not os.access(probe, os.W_OK | os.X_OK):
            self.fail(f"{text!r}: {str(probe)!r} is not writable", param, ctx)
        return path


OUT_DIR: Final = OutDir()


def make_out_dir(path: Path) -> Path:
    """Create an OUT_DIR (its parse-time check can still lose a race): exit 2 on failure."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create {str(path)!r}: {exc.strerror or exc}")
    return path


class Transport(click.ParamType[str]):
    """A transport: a URL (`tcp://127.0.0.1:0`) or a bare scheme (`tcp`, meaning that
    scheme on 127.0.0.1, any free port), the same spellings on every command. Converts to
    the URL; `scheme_of()` gives the scheme where only that matters."""

    name = "transport"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        from abcast.transport import known_schemes

        text = str(value).strip()
        scheme = text.split("://", 1)[0]
        if scheme not in known_schemes():
            self.fail(f"{text!r} is not a transport; give a URL or one of: "
                      f"{', '.join(known_schemes())}", param, ctx)
        if "://" in text:
            return text
        return "mem://" if scheme == "mem" else f"{scheme}://127.0.0.1:0"


TRANSPORT: Final = Transport()


def scheme_of(url: str) -> str:
    return url.split("://", 1)[0]


def transport_help(what: str) -> str:
    from abcast.transport import known_schemes

    return (f"{what}: a URL, or a scheme ({', '.join(known_schemes())}) for that scheme "
            "on 127.0.0.1, any free port.")


class SparkMaster(click.ParamType[str]):
    """A Spark master URL: local, local[N], local[*], local[N,F], spark://host:port[,…],
    yarn, k8s://…, mesos://…, sc://… (Spark Connect)."""

    name = "url"
    _FORMS: Final = re.compile(
        r"local(\[(\d+|\*)(,\d+)?\])?|yarn|spark://[^/:\s]+:\d+(,[^/:\s]+:\d+)*"
        r"|(k8s|mesos|sc)://\S+")

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        text = str(value).strip()
        if self._FORMS.fullmatch(text) is None:
            self.fail(f"{text!r} is not a Spark master URL (local[*], local[N], "
                      "spark://host:port, yarn, k8s://…, sc://…)", param, ctx)
        return text


SPARK_MASTER: Final = SparkMaster()


# ---------------------------------------------------------------- the ordering's knobs

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class GroupFlags:
    """The ordering's flags as parsed (`ordering_options`); `group_options` checks them
    against the ordering and builds OrderingOptions."""

    batch: int | None = None
    safe: bool = False
    relay: bool = False
    order_interval_ms: float = 0.0
    multicast: str | None = None
    partitions: str = "primary"
    suspect_after: int | None = None
    opt_alpha: float | None = None
    opt_compensate: bool = True
    ticket: str | None = None


_FLAG_NAMES: Final = tuple(f.name for f in fields(GroupFlags))


def ordering_options(*, suspect_after_default: int | None = None) -> Callable[[_F], _F]:
    """--batch, --safe, --relay, --order-interval-ms, --multicast, --partitions,
    --suspect-after, --opt-alpha, --no-opt-compensate and --ticket, declared once for every command
    that builds a group; the command receives them as one `flags: GroupFlags`, and
    `group_options(ordering, flags)` turns them into OrderingOptions."""
    suspect_help = ("Milliseconds of silence before a crash-tolerant ordering's failure "
                    "detector suspects a peer"
                    + (" (default: the ordering's own)." if suspect_after_default is None
                       else "; a false suspicion on a loaded machine only costs time, so "
                            "the default is generous."))
    decorators = [
        click.option("--batch", default=None, type=count(1, MAX_ORDER_IDS, "ids"),
                     help="Message ids per order packet (sequencer family; default "
                          "adaptive)."),
        click.option("--safe", is_flag=True,
                     help="Deliver only once a majority holds the order (uniform "
                          "agreement; sequencer family)."),
        click.option("--relay", is_flag=True,
                     help="Sequencer family: the origin sends to the sequencer only, which "
                          "relays the message with its number (n packets per broadcast, "
                          "not 2(n-1))."),
        click.option("--order-interval-ms", "order_interval_ms", default=0.0,
                     show_default=True, type=Number(float, low=0, high=10_000, what="ms"),
                     help="Sequencer family: order every id admitted during this many ms in "
                          "one order packet (ROMIOP's leader timer); 0: order each at once."),
        click.option("--multicast", default=None,
                     type=click.Choice(["reliable", "basic", "nak"]),
                     help="reliable: acks and retransmission (the default; over udp:// nak "
                          "unless given); basic: best effort, no retransmission (drops "
                          "validity and agreement); nak: multicast streams repaired by "
                          "NAKs (the udp:// default)."),
        click.option("--partitions", default="primary", show_default=True,
                     type=click.Choice(["primary", "evs"]),
                     help="evs: every partition goes on and they merge on heal (sequencer, "
                          "causal-total); primary: only a majority goes on."),
        click.option("--suspect-after", "suspect_after", default=suspect_after_default,
                     show_default=suspect_after_default is not None,
                     type=count(50, 3_600_000, "ms"), help=suspect_help),
        click.option("--opt-alpha", "opt_alpha", default=None,
                     type=Number(float, low=0, high=1, what="inertia"),
                     help="Ordering optimistic: delay compensation's inertia α in [0, 1) "
                          "(default 0.8)."),
        click.option("--opt-compensate/--no-opt-compensate", "opt_compensate",
                     default=True, show_default=True,
                     help="Ordering optimistic: compensate per-sender delays, or opt-deliver "
                          "in receipt order (the baseline)."),
        click.option("--ticket", "ticket", default=None, type=TRANSPORT,
                     help="Ordering ticket: the ticket server's address (`abcast "
                          "ticket-server`); default: the view's lowest member numbers."),
    ]

    def apply(function: _F) -> _F:
        @functools.wraps(function)
        def collect(**kwargs: Any) -> Any:
            flags = GroupFlags(**{name: kwargs.pop(name) for name in _FLAG_NAMES})
            return function(flags=flags, **kwargs)

        wrapped: Any = collect
        for decorator in reversed(decorators):
            wrapped = decorator(wrapped)
        return cast(_F, wrapped)

    return apply


def group_options(ordering: str, flags: GroupFlags) -> OrderingOptions:
    """The OrderingOptions the flags name, refused (exit 2, one line) when `ordering`
    cannot honour them — the same check the simulator makes."""
    from abcast.errors import ConfigError
    from abcast.ordering.registry import OrderingOptions, get_ordering
    from abcast.ordering.sequencer_state import OptimisticConfig

    extra: dict[str, Any] = {}
    if flags.suspect_after is not None:
        from abcast.group.failure_detector import DetectorConfig

        defaults = DetectorConfig()
        timeout_us = flags.suspect_after * 1000
        extra["detector"] = DetectorConfig(
            period_us=min(defaults.period_us, timeout_us // 2), timeout_us=timeout_us)
    try:
        if flags.opt_alpha is not None or not flags.opt_compensate:
            if ordering != "optimistic":
                raise ConfigError(f"--opt-alpha and --no-opt-compensate are for ordering "
                                  f"'optimistic', not {ordering!r}")
            alpha = OptimisticConfig().alpha if flags.opt_alpha is None else flags.opt_alpha
            extra["optimistic"] = OptimisticConfig(alpha=alpha,
                                                   compensate=flags.opt_compensate)
        if flags.ticket:
            if ordering != "ticket":
                raise ConfigError(f"--ticket is for ordering 'ticket', not {ordering!r}")
            extra["ticket"] = flags.ticket
        options = OrderingOptions(batch=flags.batch, safe=flags.safe, relay=flags.relay,
                                  multicast=flags.multicast, partitions=flags.partitions,
                                  order_interval_ms=flags.order_interval_ms, **extra)
        get_ordering(ordering).claimed(options)
    except ConfigError as exc:
        fail(str(exc))
    return options


def ordering_argv(options: OrderingOptions) -> list[str]:
    """The flags of `ordering_options` that give `options` back (the cluster launcher
    starts its nodes with them): the inverse of `group_options`."""
    argv: list[str] = []
    if options.batch is not None:
        argv += ["--batch", str(options.batch)]
    if options.safe:
        argv.append("--safe")
    if options.relay:
        argv.append("--relay")
    if options.multicast is not None:
        argv += ["--multicast", options.multicast]
    argv += ["--partitions", options.partitions]
    if options.order_interval_ms:
        argv += ["--order-interval-ms", repr(options.order_interval_ms)]
    argv += ["--suspect-after", str(options.detector.timeout_us // 1000)]
    optimistic = options.optimistic
    if optimistic != type(optimistic)():
        argv += ["--opt-alpha", repr(optimistic.alpha)]
        if not optimistic.compensate:
            argv.append("--no-opt-compensate")
    if options.ticket:
        argv += ["--ticket", options.ticket]
    return argv


# ---------------------------------------------------------------- the group secret

#: where a command finds the group secret when --secret-file is not given
SECRET_ENV: Final = "ABCAST_SECRET"


def secret_option(what: str = "the group") -> Callable[[_F], _F]:
    """--secret-file, declared once for every command that takes a group secret. The
    secret itself never goes on a command line (it would show in `ps` and in shell
    history): it comes from that file or from $ABCAST_SECRET."""
    return click.option(
        "--secret-file", "secret_file", default=None,
        type=click.Path(dir_okay=False, path_type=Path),
        help=f"File holding {what}'s secret (authenticated links and registry requests; "
             f"docs/operations.md, Security). Default: ${SECRET_ENV} if set, else none.")


def group_secret(secret_file: Path | None) -> bytes | None:
    """The group secret: the file's bytes (one trailing newline dropped), else
    $ABCAST_SECRET, else None; refused (one line, exit 2) if it cannot be a secret."""
    from abcast.errors import ConfigError
    from abcast.security import load_secret

    raw: bytes | None
    if secret_file is not None:
        try:
            raw = secret_file.read_bytes()
        except OSError as exc:
            fail(f"cannot read --secret-file {str(secret_file)!r}: {exc.strerror or exc}")
        raw = raw[:-1] if raw.endswith(b"\n") else raw
        raw = raw[:-1] if raw.endswith(b"\r") else raw
    else:
        env = os.environb.get(SECRET_ENV.encode())
        raw = env if env else None
    try:
        return load_secret(raw)
    except ConfigError as exc:
        where = f"--secret-file {str(secret_file)!r}" if secret_file else f"${SECRET_ENV}"
        fail(f"{where}: {exc}")
