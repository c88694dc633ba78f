"""Settings dataclasses whose fields are their command's options.

A role's settings (the ventilator's RunConfig, the sink's and the worker's settings) are frozen dataclasses.
Each field that a user can set carries its declaration (:func:`option`: a :class:`common.job.params.Option`, as a
step's or a variant's parameter does), so one declaration gives the option, its default and the typed value;
:func:`click_option` makes every command's click options from declarations (:func:`command_option` for a command
written as a function), and :func:`env_var` names every option's variable; :func:`add_options` puts the
options on a click command,
:func:`build` turns click's values back into the dataclass (groups nested as fields), and :func:`to_argv`
writes a settings object as the command line that rebuilds it, which is how one process hands its settings
to another (the ventilator starting the sink and the workers) without a second list of flags.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import typing
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from common.job.params import Option, PluginError, declare, option_of, type_hints
from common.wire.transport import AddressError, parse_address

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_MISSING = dataclasses.MISSING
#: A settings dataclass.
S = TypeVar("S", bound="DataclassInstance")


def option(*decls: str, default: Any = _MISSING, cli_default: Any = None, always_written: bool = False,
           decides_data: bool | None = None, section: str = "", derived: str = "", described: str = "",
           describes: str = "", help: str = "", **click_kwargs: Any) -> Any:  # `help`: click's word
    """A field that is the option ``decls`` (click's declarations, without the parameter name: the field's
    name is that): a role's setting, declared as every option is (:class:`common.job.params.Option`).
    ``default`` is the one source of the default; ``cli_default`` only where the command line shows it
    otherwise (``8M`` for 8388608 bytes).  ``always_written``: to_argv writes it even at its default, which
    depends on the host (a worker's --processes: this host's cores, not the receiving one's).
    ``decides_data``: whether the option's value changes the data made (:func:`data_argv`), where it is not
    its group's ``decides_data`` (a class attribute; False if absent).  ``section``: its heading in --help, where
    not its group's.  ``derived``/``described``: what the default is where its value does not say it (shown
    once: ``[default: derived: ...]``).  ``describes``: the setting of dataset_info.json it sets (its changes
    name this flag)."""
    long = next(decl for decl in decls if decl.startswith("--"))
    return declare(default, Option(help=help, flag=long.split("/")[0].strip(), decls=decls, section=section,
                                   derived=derived, described=described, decides_data=decides_data,
                                   always_written=always_written, cli_default=cli_default, describes=describes,
                                   click=click_kwargs))


def groups(settings_class: type) -> dict[str, type]:
    """The fields that hold a group of settings (a dataclass), by name: their class."""
    hints = type_hints(settings_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(settings_class)
            if option_of(f) is None and dataclasses.is_dataclass(hints[f.name])}


def option_fields(settings_class: type) -> Iterator[dataclasses.Field]:
    """Every field that is an option, groups opened, in order."""
    for f, _group in _fields_by_group(settings_class):
        yield f


def option_flags(settings_class: type) -> dict[str, list[str]]:
    """Each option's flags by its field's name, groups opened (a switch's ``--no-`` flag too)."""
    return {f.name: [part.strip() for decl in _option(f).decls for part in decl.split("/")]
            for f in option_fields(settings_class)}


def _option(f: dataclasses.Field) -> Option:
    """The declaration of a field known to be an option."""
    option = option_of(f)
    assert option is not None, f.name
    return option


def _fields_by_group(settings_class: type) -> Iterator[tuple[dataclasses.Field, type]]:
    """(option field, the settings class that declares it), groups opened, in order."""
    nested = groups(settings_class)
    for f in dataclasses.fields(settings_class):
        if option_of(f) is not None:
            yield f, settings_class
        elif f.name in nested:
            yield from _fields_by_group(nested[f.name])


class SectionedOption(click.Option):
    """An option shown under a heading of ``--help`` (:class:`SectionedCommand`); ``section_after``: the heading
    its section follows, for options made elsewhere than their neighbours (a step's own flags).
    ``shown_default``: its default as --help says it, where the value does not say it (a derived default, what
    None means, each variant's own): in click's one bracket, instead of the value."""

    def __init__(self, *args: Any, section: str = "", section_after: str = "", shown_default: str = "",
                 declaration: Option | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.declaration = declaration  # what made it (click_option)
        self.section = section
        self.section_after = section_after
        self.shown_default = shown_default

    def get_help_extra(self, ctx: click.Context) -> Any:  # click's OptionHelpExtra
        extra = super().get_help_extra(ctx)
        if self.shown_default:
            extra["default"] = self.shown_default
        if "[default:" in (self.help or ""):  # a plugin's help that says its default itself, as click's habit
            extra.pop("default", None)
        return extra


#: The range of every integer option: what every wire message, JSON reader and numpy array can hold.  A larger
#: value is refused when it is parsed, one line naming its flag, not as a traceback where it is first encoded.
INT_MIN, INT_MAX = -(2**63), 2**63 - 1


def env_prefix(command: str) -> str:
    """The one rule for a command's variables: ``MLM_``, the command's name, ``_``, the option's flag
    (``mlm-loader --data``: ``MLM_LOADER_DATA``), so no role reads another's variable."""
    return env_var("MLM", command)


def env_var(prefix: str, flag: str) -> str:
    """The variable of the option ``flag`` under ``prefix`` (:func:`env_prefix`'s): the prefix, ``_``, the flag's
    words (``MLM_VENTILATOR`` and ``--dupe-factor``: ``MLM_VENTILATOR_DUPE_FACTOR``).  The only place the rule is
    written: click's options get theirs from it (:func:`_settle`), and so do the names no command reads now."""
    return f"{prefix}_{flag.lstrip('-').upper().replace('-', '_')}"


#: The commands whose variables :func:`env_prefix` names (the console scripts' names, without ``mlm-``).
COMMANDS = ("ventilator", "worker", "sink", "loader", "report", "verify", "train-vocab")


def stale_variables(ctx: click.Context, params: list[click.Parameter]) -> list[str]:
    """The variables set under the name every command once shared (``MLM_DUPE_FACTOR``) for an option of this
    one that no command reads now: each would be silently ignored, and the job made otherwise than meant."""
    owned = tuple(env_prefix(command) + "_" for command in COMMANDS)
    stale = []
    for param in params:
        if isinstance(param, click.Option) and param.opts[-1].startswith("--") and isinstance(param.envvar, str):
            old = env_var("MLM", _long_flag(param))
            if old != param.envvar and os.environ.get(old) and not old.startswith(owned):
                stale.append(f"{old} (this command's {_long_flag(param)} is {param.envvar})")
    return stale


def command_settings(command: str, **more: Any) -> dict[str, Any]:
    """click's ``context_settings`` for the command ``command`` (``ventilator``, ``loader``, ``train-vocab``):
    its variables' prefix (:func:`env_prefix`), ``-h``, defaults shown."""
    return {"auto_envvar_prefix": env_prefix(command), "show_default": True,
            "help_option_names": ["-h", "--help"], **more}


def _long_flag(param: click.Parameter) -> str:
    return next((flag for flag in param.opts if flag.startswith("--")), param.opts[0])


class _Int64(click.types.IntParamType):
    """An integer option's type where it had no range: any int64."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return _in_int64(self, super().convert(value, param, ctx), param, ctx)


class _Int64Range(click.IntRange):
    """An integer option's range, within int64 (shown in --help as it was declared)."""

    def __init__(self, declared: click.IntRange):
        super().__init__(declared.min, declared.max, min_open=declared.min_open, max_open=declared.max_open,
                         clamp=declared.clamp)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(_in_int64(self, click.INT.convert(value, param, ctx), param, ctx), param, ctx)


def _in_int64(kind: click.ParamType, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        kind.fail(f"{value} is out of range: an integer option takes {INT_MIN} to {INT_MAX}", param, ctx)
    return value


class _NumberFloatRange(click.FloatRange):
    """A float option's range that is a number: NaN compares false with every bound, so a range alone lets it
    through (a --storage-timeout of nan was no bound at all)."""

    def __init__(self, declared: click.FloatRange):
        super().__init__(declared.min, declared.max, min_open=declared.min_open, max_open=declared.max_open,
                         clamp=declared.clamp)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value} is not a number", param, ctx)
        return super().convert(number, param, ctx)


class _NumberFloat(click.types.FloatParamType):
    """A float option with no range: a number (not NaN)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value} is not a number", param, ctx)
        return number


class Size(click.ParamType):
    """A byte count as users write it (8M, 256K, 1g or a number: :func:`common.job.tasks.parse_size`), an int64."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from common.job.tasks import parse_size

        try:
            size = parse_size(value)
        except ValueError as error:
            self.fail(str(error), param, ctx)
        return _in_int64(self, size, param, ctx)


class Address(click.ParamType):
    """A peer's ``HOST:PORT`` (``HOST`` alone: ``default_port``), checked by the wire's one parser
    (:func:`common.wire.transport.parse_address`) so a typo is a usage error, not a process waiting for ever on
    an endpoint ZeroMQ took.  The value stays the text given; empty is "not given" (an optional option's
    default)."""

    name = "HOST:PORT"

    def __init__(self, default_port: int | None = None) -> None:
        self.default_port = default_port

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "":
            return value
        try:
            parse_address(str(value), self.default_port, host_required=True)
        except AddressError as error:
            self.fail(str(error), param, ctx)
        return str(value)


def _settle(param: click.Parameter, prefix: str | None) -> None:
    """What every option of every command has, whoever declared it: its variable by :func:`env_prefix`'s rule
    (from its flag), an integer's int64 range, and a float that is a number."""
    if isinstance(param, click.Option) and param.envvar is None and param.allow_from_autoenv and prefix:
        param.envvar = env_var(prefix, _long_flag(param))
    if isinstance(param.type, click.IntRange) and not isinstance(param.type, _Int64Range):
        param.type = _Int64Range(param.type)
    elif type(param.type) is click.types.IntParamType:
        param.type = _Int64()
    elif isinstance(param.type, click.FloatRange) and not isinstance(param.type, _NumberFloatRange):
        param.type = _NumberFloatRange(param.type)
    elif type(param.type) is click.types.FloatParamType:
        param.type = _NumberFloat()


def variable_of(ctx: click.Context, param: click.Parameter) -> str | None:
    """The variable ``param``'s value came from, or None (the command line, a default)."""
    if ctx.get_parameter_source(param.name or "") is not ParameterSource.ENVIRONMENT:
        return None
    envvar = param.envvar
    names = [envvar] if isinstance(envvar, str) else list(envvar or [])
    return next((name for name in names if name in os.environ), names[0] if names else None)


def naming_variables(message: str, ctx: click.Context | None = None) -> str:
    """``message`` with each flag whose value came from an environment variable followed by that variable
    (``--dupe-factor (from MLM_VENTILATOR_DUPE_FACTOR)``): a refusal a variable caused names it."""
    ctx = ctx if ctx is not None else click.get_current_context(silent=True)
    if ctx is None:
        return message
    for param in ctx.command.get_params(ctx):
        variable = variable_of(ctx, param)
        if variable is None or variable in message:
            continue
        for flag in [*param.opts, *param.secondary_opts]:
            pattern = re.compile(rf"(?<![\w-]){re.escape(flag)}(?![\w-])")
            if pattern.search(message):
                message = pattern.sub(f"{flag} (from {variable})".replace("\\", "\\\\"), message, count=1)
                break
    return message


class SectionedCommand(click.Command):
    """``--help`` with the options under their sections' headings, in the order the sections first appear
    (a settings group's ``section``, or the one an option was given), instead of one flat list; a section whose
    options name the heading it follows (``section_after``) is shown right after that one.

    Every command of the project is one: its options get their variables by one rule and integers their
    range (:func:`_settle`), and a refusal a variable caused names the variable (:func:`naming_variables`)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        for param in params:
            _settle(param, ctx.auto_envvar_prefix)
        return params

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as error:
            param = error.param
            variable = variable_of(ctx, param) if param is not None else None
            if param is not None and variable is not None and error.param_hint is None:
                error.param_hint = f"'{_long_flag(param)}' (from {variable})"
            raise

    def invoke(self, ctx: click.Context) -> Any:
        stale = stale_variables(ctx, self.get_params(ctx))
        if stale:
            raise click.UsageError(f"{'; '.join(stale)}: no command reads {'it' if len(stale) == 1 else 'them'} "
                                   "now (each reads its own: MLM_, its name, the flag): rename or unset", ctx)
        try:
            return super().invoke(ctx)
        except click.ClickException as error:
            vars(error)["message"] = naming_variables(error.message, ctx)  # click declares it Final
            raise

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {}
        follows: dict[str, str] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and not isinstance(param, click.Argument):  # as click's own: options only
                section = getattr(param, "section", "") or OTHER_SECTION
                sections.setdefault(section, []).append(record)
                if getattr(param, "section_after", ""):
                    follows[section] = param.section_after  # type: ignore[attr-defined]
        order = [name for name in sections if follows.get(name) not in sections]
        pending = [name for name in sections if name not in order]
        while pending:
            ready = [name for name in pending if follows[name] in order]
            if not ready:  # a cycle of headings: shown where they first appear
                order += pending
                break
            for name in ready:
                order.insert(order.index(follows[name]) + 1, name)
                pending.remove(name)
        for name, rows in ((name, sections[name]) for name in order):
            with formatter.section(name):
                formatter.write_dl(rows)


#: Where an option without a section is shown (--help itself, a role without groups).
OTHER_SECTION = "Options"


class Deferred:
    """An option's click type made when the command's options are (:class:`DeferredCommand`), not when its
    module is imported: a choice among an axis's variants, which are found then (installed plugins too)."""

    def __init__(self, make: Callable[[], click.ParamType]):
        self.make = make


class PluginFailure(click.ClickException):
    """An installed plugin cannot be loaded (:class:`common.job.params.PluginError`): one line naming it, the
    command's failure status, whichever command asked (the ventilator, the loader, mlm-report)."""

    exit_code = 1

    def show(self, file: typing.IO[Any] | None = None) -> None:
        context = click.get_current_context(silent=True)
        name = context.find_root().info_name if context is not None else None
        click.echo(f"{name or 'mlm-pipeline'}: error: {self.message}", err=True)


class DeferredCommand(SectionedCommand):
    """A command whose options are made on first use (parsing, --help, a look at ``params``), by ``options``
    (a decorator that adds them, as :func:`add_options` does): importing its module finds no variant and
    never exits; a variant that cannot be loaded is a :class:`click.ClickException` (one line) then."""

    _options: Callable[[Callable], Callable] | None = None
    _params: list[click.Parameter]

    def __init__(self, *args: Any, options: Callable[[Callable], Callable], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._options = options

    @property  # click's attribute, made on first use
    def params(self) -> list[click.Parameter]:
        if self._options is not None:
            add, self._options = self._options, None

            def holder() -> None: ...

            try:
                add(holder)
            except PluginError as error:  # a plugin that cannot be loaded: the command's one line, --help too
                raise PluginFailure(str(error)) from None
            self._params = [*reversed(getattr(holder, "__click_params__", [])), *self._params]
        return self._params

    @params.setter
    def params(self, value: list[click.Parameter]) -> None:
        self._params = value


def click_option(option: Option, name: str, default: Any = _MISSING, hint: Any = None, section: str = "",
                 section_after: str = "", shown_default: str = "") -> Callable:
    """The click option (a decorator) that ``option`` declares, for the parameter ``name``: every option of every
    command is made here, a role's setting, a step's flag and a variant's parameter alike.  ``hint``: the
    field's type (a bool is a ``--x/--no-x`` switch); ``default``: the option's (MISSING: none, or required);
    ``shown_default``: what --help says of the default where not the declaration's own."""
    kwargs = dict(option.click)
    if isinstance(kwargs.get("type"), Deferred):
        kwargs["type"] = kwargs["type"].make()
    if option.choices:
        kwargs.setdefault("type", click.Choice(list(option.choices)))
    if "type" not in kwargs and hint is not None and not option.decls:
        kwargs["type"] = None if hint is bool else hint
    flag = option.flag or "--" + name.replace("_", "-")
    decls = option.decls or ((f"{flag}/--no-{flag[2:]}",) if hint is bool else (flag,))
    if default is not _MISSING and not kwargs.get("required"):
        kwargs["default"] = default
    kwargs.setdefault("show_envvar", True)
    return click.option(*decls, name, cls=SectionedOption, section=option.section or section,
                        section_after=section_after, help=option.help,
                        shown_default=option.shown_default or shown_default, declaration=option, **kwargs)


def command_option(*decls: str, default: Any = _MISSING, section: str = "", derived: str = "", described: str = "",
                   help: str = "", **click_kwargs: Any) -> Callable:  # `help`: click's word
    """The option ``decls`` (click's declarations; a name without dashes names its parameter) as a decorator, for a
    command written as a function (mlm-loader, mlm-report, mlm-verify, mlm-train-vocab): declared as every option
    is (:class:`common.job.params.Option`), the same arguments as a settings field's :func:`option`."""
    flags = tuple(decl for decl in decls if decl.startswith("-"))
    names = [decl for decl in decls if not decl.startswith("-")]
    long = next(decl for decl in flags if decl.startswith("--")).split("/")[0].strip()
    declared = Option(help=help, flag=long, decls=flags, section=section, derived=derived, described=described,
                      click=click_kwargs)
    return click_option(declared, names[0] if names else long[2:].replace("-", "_"), default)


def _settings_option(f: dataclasses.Field, section: str = "") -> Callable:
    """A role's setting's click option: its default is the field's, or as the command line shows it."""
    option = _option(f)
    default = f.default if option.cli_default is None else option.cli_default
    return click_option(option, f.name, default, section=section)


def add_options(settings_class: type) -> Callable:
    """Decorator: the settings' options on a click command, in field order, each under its own ``section``
    (its declaration's), or its group's (a class attribute)."""
    names = [f.name for f in option_fields(settings_class)]
    clashing = sorted({name for name in names if names.count(name) > 1})
    if clashing:
        raise TypeError(f"{settings_class.__name__}: two options named {', '.join(clashing)}")
    def decorate(command: Callable) -> Callable:
        for f, group in reversed(list(_fields_by_group(settings_class))):
            command = _settings_option(f, getattr(group, "section", ""))(command)
        return command

    return decorate


def build(settings_class: type[S], values: dict[str, Any]) -> S:
    """The settings from click's values (by field name); the values used are taken out of ``values``, so
    what is left is for someone else (the axes' options)."""
    kwargs = {}
    nested = groups(settings_class)
    for f in dataclasses.fields(settings_class):
        if option_of(f) is not None:
            if f.name in values:
                kwargs[f.name] = values.pop(f.name)
        elif f.name in nested:
            kwargs[f.name] = build(nested[f.name], values)
    return settings_class(**kwargs)


def to_argv(settings: DataclassInstance) -> list[str]:
    """The command line that gives ``settings`` back: each option whose value is not its default (the
    receiving command has the same defaults, from the same dataclass)."""
    argv: list[str] = []
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if option_of(f) is None:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                argv += to_argv(value)
            continue
        argv += _field_argv(f, value)
    return argv


def _field_argv(f: dataclasses.Field, value: Any) -> list[str]:
    """One option's part of :func:`to_argv` (nothing at its default)."""
    option = _option(f)
    decls, click_kwargs = option.decls, option.click
    if value is None or (f.default is not _MISSING and value == f.default and not option.always_written):
        return []
    flags = [decl for decl in decls if decl.startswith("--")]
    if click_kwargs.get("count"):
        short = next((decl for decl in decls if not decl.startswith("--")), flags[0])
        return [short] * int(value)
    if "/" in flags[0]:
        on, off = (part.strip() for part in flags[0].split("/"))
        return [on if value else off]
    if click_kwargs.get("is_flag"):
        return [flags[0]] if value else []
    if click_kwargs.get("multiple"):
        return [part for item in value for part in (flags[0], str(item))]
    return [flags[0], str(value)]


def path_name(value: str) -> str:
    """A path or URI as a dataset card shows it: its last part (``/home/me/corpus/wiki/``: ``wiki``;
    ``s3://bucket/out``: ``out``), so no machine's layout is published and two fleets show one name."""
    if "://" in value:
        return value.rstrip("/").rsplit("/", 1)[-1] or value
    return os.path.basename(os.path.normpath(os.path.abspath(value)))


def data_argv(settings: DataclassInstance, decides: bool = False) -> list[str]:
    """The options of ``settings`` that decide the data (an option's own ``decides_data``, else its group's),
    at other than their defaults, each path (a ``click.Path`` option) as :func:`path_name` shows it: the
    command a dataset card shows, the same for every fleet and machine that makes the same data."""
    argv: list[str] = []
    decides = getattr(type(settings), "decides_data", decides)
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if option_of(f) is None:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                argv += data_argv(value, decides)
            continue
        own = _option(f).decides_data
        if not (decides if own is None else own):
            continue
        part = _field_argv(f, value)
        if len(part) == 2 and isinstance(_option(f).click.get("type"), click.Path):
            part = [part[0], path_name(part[1])]
        argv += part
    return argv


def parse(settings_class: type[S], argv: list[str], command: str | None = None) -> S:
    """The settings a command line (and the environment's variables of ``command``, :func:`env_prefix`) gives,
    as the role's own command would build them."""
    built: list[S] = []
    prefix = env_prefix(command) if command else None

    @click.command(cls=SectionedCommand, context_settings={"auto_envvar_prefix": prefix})
    @add_options(settings_class)
    def settings_command(**values: Any) -> None:
        built.append(build(settings_class, values))

    settings_command.main(argv, standalone_mode=False)
    return built[0]
