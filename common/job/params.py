"""Components and their parameters: how a reader, an objective or a writer
is named in the job, configured from the command line, and shipped.

Every axis of the pipeline (reader, objective, writer) is a set of
components found by name.  A component declares its parameters as a frozen
dataclass (``Params``) whose fields are options (:func:`param`): each carries
its one declaration, an :class:`Option` (flag, help, section, choices, default
as shown, when it applies), as every option of every command does.  The
ventilator builds its command-line options from those dataclasses, so a new
component brings its own flags, and the job carries the chosen component as a
:class:`Component` (a name and a flat mapping of scalar values), so neither the
roles nor the wire protocol know any component's parameters.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from importlib.metadata import EntryPoints, SelectableGroups

    from _typeshed import DataclassInstance

#: What a parameter may hold: the wire carries these as they are.
ParamValue = bool | int | float | str


@dataclass(frozen=True)
class Component:
    """One module of an axis, by name, with its parameters as plain values."""

    name: str
    params: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True)
class NoParams:
    """The parameters of a component that has none."""


class ParamsInstance(typing.Protocol):
    """Any component's parameters: an instance of its ``Params`` dataclass (what ``make_params`` returns)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


@dataclass(frozen=True)
class When:
    """Where a parameter does something: only when ``holds(params)`` is true (masks drawn here, n-grams of
    two words or more).  Elsewhere a value other than its default is refused (:meth:`Configurable.make_params`):
    a flag that does nothing must not be accepted and recorded as if it did."""

    holds: Callable[[Any], bool]
    described: str  # the condition as the flags say it: "--masking static"


#: The field metadata key of an option's declaration (:class:`Option`).
OPTION = "option"


@dataclass(frozen=True)
class Option:
    """One command-line option, declared once, on the dataclass field it sets (:func:`declare`): a step's or a
    variant's parameter (:func:`param`) and a role's setting (``common.job.cli_settings.option``) alike.  Its
    click option, its ``--help`` entry (under ``section``, one default shown once), its variable
    (``common.job.cli_settings.env_var``), the refusal of a value that does nothing (``when``), the flag that
    dataset_info.json's changes name (``describes``) and the job's record (``opt_in``) all come from it."""

    help: str
    flag: str = ""  # the long flag; "" for a parameter: ``--`` and the field's name (a step's: no flag at all)
    decls: tuple[str, ...] = ()  # click's declarations where there are more ("-v", "--verbose"; "--x/--no-x")
    section: str = ""  # its heading in --help; "" for its group's (a class attribute ``section``)
    choices: tuple[str, ...] = ()  # a string's values: shown by --help and checked by the command line
    derived: str = ""  # the default is worked out when the job is planned: how ("from --minhash-threshold")
    described: str = ""  # what its default means, where the value does not say ("off" for None)
    when: When | None = None  # where it does something: elsewhere a value other than its default is refused
    opt_in: bool = False  # a switch added to a variant later: left off, not recorded in the job
    shared: bool = False  # the axis's common parameter: variants that each declare it shared take one flag
    decides_data: bool | None = None  # whether the data depends on it, where not its group's ``decides_data``
    always_written: bool = False  # handed on (cli_settings.to_argv) even at its default: it depends on the host
    cli_default: Any = None  # the default as the command line shows it, where not the value (8M); None: the value
    describes: str = ""  # the setting of dataset_info.json it sets, by path ("input.task_size")
    click: dict[str, Any] = field(default_factory=dict)  # click's settings beyond these: type, metavar, ...

    @property
    def shown_default(self) -> str:
        """The default as --help says it where its value does not: ``derived: ...`` or what it means."""
        return f"derived: {self.derived}" if self.derived else self.described


def declare(default: Any, option: Option) -> Any:
    """The dataclass field declared by ``option``, with ``default`` (MISSING: required): the one way an option
    is made, whichever spelling (:func:`param`, ``cli_settings.option``) names it."""
    if default is dataclasses.MISSING:
        return field(metadata={OPTION: option})
    return field(default=default, metadata={OPTION: option})


def option_of(f: dataclasses.Field) -> Option | None:
    """The option a field declares; None for a field that is none (a group, a value the command collects)."""
    return f.metadata.get(OPTION)


#: click's settings that :func:`param` makes from the declaration: given in ``cli`` too, click saw two values.
_OWNED_BY_PARAM = {"default", "cls", "section", "section_after", "shown_default", "declaration", "param_decls"}


def param(default: Any, help: str, flag: str = "", opt_in: bool = False,  # `help` shadows a builtin: click's word
          when: When | None = None, shared: bool = False, cli: dict[str, Any] | None = None,
          choices: tuple[str, ...] = (), derived: str = "", described: str = "") -> Any:
    """A Params field that is an option (:class:`Option`, :func:`declare`): the plugin API's spelling, its
    default and help first.

    A step that says when it is on (``Step.enabled``) makes its fields that name their ``flag`` its own options,
    with their defaults as they are (a feature's flags: ``--holdout-fraction``), checked by the field's type or
    by ``cli``'s ``type`` (a range).  A variant's fields are all options (``--`` and the field's name, or
    ``flag``).

    ``opt_in``: a switch added to a variant after jobs were run with it (its default is "off" for good).  Left
    at its default, it is not recorded in the job, so adding it changes no existing job's id (a resume of an
    output written before finds its job).  ``when``: the parameter does something only then (:class:`When`).
    ``shared``: the axis's common parameter of that name (every objective's ``--max-seq-length``): variants
    that each declare it shared take one flag; otherwise two variants declaring one flag are refused
    (:func:`option_specs`).  ``cli``: more of click's option settings (``metavar``, ``type``: a range; a
    ``help`` there, click's habit, is the help).
    ``choices``: the values a string parameter takes, shown by ``--help`` and checked by the command line
    (``validate`` still checks a job's).  ``derived``: the default (0, say) means "worked out when the job is
    planned", and how; ``described``: what the default means where its value does not say it."""
    click = dict(cli or {})
    owned = sorted(set(click) & _OWNED_BY_PARAM)
    if owned:
        raise ValueError(f"param({default!r}, ...): cli={{{', '.join(map(repr, owned))}: ...}} is param's own "
                         f"(the default is its first argument; the rest are made from the declaration)")
    given = click.pop("help", None)  # click's habit: the help among the option's settings
    if given is not None and help and given != help:
        raise ValueError(f"param({default!r}, {help!r}, cli={{'help': ...}}): two help texts; give it once")
    return declare(default, Option(help=help or str(given or ""), flag=flag, choices=tuple(choices),
                                   derived=derived, described=described, when=when, opt_in=opt_in, shared=shared,
                                   click=click))


def idle_fields(params: DataclassInstance) -> list[dataclasses.Field]:
    """The fields set to other than their default that do nothing with the rest of ``params`` (:class:`When`)."""
    return [f for f in dataclasses.fields(params) if (option := option_of(f)) is not None and option.when is not None
            and getattr(params, f.name) != f.default and not option.when.holds(params)]


def applying(params_class: type, values: dict[str, ParamValue]) -> dict[str, ParamValue]:
    """``values`` (a step's or a variant's, as a job records them) but those whose declaration says they do
    nothing with the rest (:class:`When`: MinHash's options under ``--dedup exact``): what applies."""
    try:
        params = params_class(**{name: _coerce(params_class, name, value) for name, value in values.items()})
    except TypeError:  # a value for a parameter this release lacks: all shown, as recorded
        return dict(values)
    idle = {f.name for f in dataclasses.fields(params)
            if (option := option_of(f)) is not None and option.when is not None and not option.when.holds(params)}
    return {name: value for name, value in values.items() if name not in idle}


class Configurable:
    """A component: its ``name`` and a ``Params`` dataclass; ``params`` is
    the instance built from the job."""

    name: ClassVar[str]
    Params: ClassVar[type]
    #: The version of this variant's behaviour: bumped when the same job would write other bytes for input
    #: the previous code wrote as valid (docs/design.md, "Versions").  A version above 1 is part of the job's
    #: id, so an output begun by the previous behaviour is another job's and is not resumed into a mix.
    version: ClassVar[int] = 1

    @classmethod
    def make_params(cls, given: dict[str, ParamValue]) -> Any:  # an instance of cls.Params, typed per variant
        """The Params from the values given (the rest keep their defaults),
        checked (``validate``, if the class has one): ValueError otherwise."""
        names = {f.name for f in dataclasses.fields(cls.Params)}
        unknown = sorted(set(given) - names)
        if unknown:
            its = ", ".join(flag_of(cls.Params, n) for n in sorted(names)) or "none"
            raise ValueError(f"{', '.join(flag_of(cls.Params, n) for n in unknown)} does not apply to "
                             f"{cls.name} (its options: {its})")
        params = cls.Params(**{name: _coerce(cls.Params, name, value) for name, value in given.items()})
        validate = getattr(params, "validate", None)
        if validate is not None:
            validate()
        idle = idle_fields(params)
        if idle:
            by_condition: dict[str, list[str]] = {}
            for f in idle:
                when = typing.cast(When, typing.cast(Option, option_of(f)).when)
                by_condition.setdefault(when.described, []).append(flag_of(cls.Params, f.name))
            raise ValueError("; ".join(f"{', '.join(flags)} {'does' if len(flags) == 1 else 'do'} nothing but with "
                                       f"{condition}: leave {'it' if len(flags) == 1 else 'them'} out"
                                       for condition, flags in by_condition.items()))
        return params

    @classmethod
    def component(cls, params: Any) -> Component:  # cls.Params's instance: a variant narrows it
        """The job's record of this component with ``params``: every field (but opt-in switches left off),
        so a later change of a default cannot change what a job means."""
        recorded = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)
                    if not ((option := option_of(f)) and option.opt_in and getattr(params, f.name) == f.default)}
        return Component(cls.name, recorded)


@functools.cache
def type_hints(settings_class: type) -> typing.Mapping[str, Any]:
    """``typing.get_type_hints`` of a settings or parameters dataclass, read-only, evaluated once per class:
    building the ventilator's command line asks for the same classes' hints ~480 times (a class's annotations
    never change once it is defined, so every answer is the first one)."""
    return MappingProxyType(typing.get_type_hints(settings_class))


def _coerce(params_class: type, name: str, value: ParamValue) -> ParamValue:
    """Ints given for float fields become floats, so equal settings make equal jobs."""
    hint = type_hints(params_class)[name]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def own_flag(f: dataclasses.Field) -> str:
    """The flag a field's declaration names itself; "" where it names none."""
    option = option_of(f)
    return option.flag if option is not None else ""


def flag_of(params_class: type, name: str) -> str:
    """The flag of the parameter ``name``: its declaration's, else ``--`` and its name."""
    for f in dataclasses.fields(params_class):
        if f.name == name and own_flag(f):
            return own_flag(f)
    return "--" + name.replace("_", "-")


def option_named(params_class: type, name: str) -> Option | None:
    """The declaration of the parameter ``name`` of ``params_class``; None where it has none."""
    return next((option_of(f) for f in dataclasses.fields(params_class) if f.name == name), None)


def typed(flag: str, value: Any, option: Option | None = None) -> str:
    """The option ``flag`` set to ``value`` as a user types it on the command line: a switch as its flag or its
    off form (``--gzip``, ``--no-gzip``: its declaration's where it names one), anything else as the flag and
    the value (``--dupe-factor 5``, ``--masking static``; ``none`` for no value, JSON for a list)."""
    if isinstance(value, bool):
        forms = next((decl.split("/") for decl in (option.decls if option else ()) if "/" in decl), None)
        if forms is not None:
            return (forms[0] if value else forms[1]).strip()
        return flag if value else f"--no-{flag[2:]}"
    shown = "none" if value is None else json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return f"{flag} {shown}"


def changed(flag: str, before: Any, after: Any, option: Option | None = None) -> str:
    """An option's change as a refused resume names it, each side as typed (:func:`typed`): ``--no-gzip →
    --gzip``, ``--dupe-factor 10 → 5``."""
    if isinstance(before, bool) or isinstance(after, bool):
        return f"{typed(flag, before, option)} → {typed(flag, after, option)}"
    return f"{typed(flag, before, option)} → {typed(flag, after, option)[len(flag) + 1:]}"


@dataclass
class OptionSpec:
    """One command-line option: one variant's parameter, or a parameter several variants declare shared."""

    name: str  # click's parameter name (the flag's words: the env var MLM_<NAME>)
    flag: str
    type: type
    help: str
    defaults: dict[str, Any]  # component name -> its default
    declared_by: str = ""  # the first component with the field, to name in a clash
    field_name: str = ""  # the Params field it sets (the same in every component that takes it)
    option: Option = field(default_factory=lambda: Option(help=""))  # the first component's declaration
    shared: bool = False


class ParamClash(Exception):
    """Two components (a plugin's, say) declare one flag without both declaring it shared, or with different
    types: it cannot be one flag."""


def _type_name(hint: object) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _described(component: type[Configurable]) -> str:
    return f"{component.name!r} ({component.__module__}.{component.__qualname__})"


def option_specs(components: Iterable[type[Configurable]]) -> list[OptionSpec]:
    """One option per flag of the components' parameters.  A flag belongs to one variant, unless every
    variant declaring it declares it ``shared`` (same field, same type): then it is one option for them all.
    Anything else is ParamClash, naming both variants: two variants never silently share a flag."""
    specs: dict[str, OptionSpec] = {}
    for component in components:
        hints = type_hints(component.Params)
        for f in dataclasses.fields(component.Params):
            flag = flag_of(component.Params, f.name)
            option = option_of(f) or Option(help="")
            shared = option.shared
            spec = specs.get(flag)
            if spec is None:
                spec = specs[flag] = OptionSpec(flag[2:].replace("-", "_"), flag, hints[f.name], option.help, {},
                                                _described(component), f.name, option, shared)
            elif spec.type is not hints[f.name]:
                raise ParamClash(f"{spec.flag} is declared {_type_name(spec.type)} by {spec.declared_by} and "
                                 f"{_type_name(hints[f.name])} by {_described(component)}: "
                                 f"variants share one flag per parameter name, so rename one of them")
            elif not (spec.shared and shared and spec.field_name == f.name):
                raise ParamClash(f"{spec.flag} is declared by {spec.declared_by} and by {_described(component)}: "
                                 f"two variants share a flag only if both declare it shared "
                                 f"(param(..., shared=True)); else give one its own (param(..., flag=...))")
            spec.defaults[component.name] = f.default
    return list(specs.values())


def shown_value(value: Any, flag: str) -> str:
    """A default as --help shows it, as click shows one: a switch by its flag's words (``no-gzip``), "" as
    ``""``, anything else as it prints."""
    if isinstance(value, bool):
        return flag[2:] if value else f"no-{flag[2:]}"
    return '""' if value == "" else str(value)


def defaults_text(spec: OptionSpec, variants: int = 0) -> str:
    """The default of a variant's option as --help shows it: the value where every one of the axis's
    ``variants`` (a count; 0: all that declare it) takes it, else with the variants that take it
    (``full-sentences (roberta)``), or each variant's own (``albert 512, bert 128``)."""
    values = {shown_value(v, spec.flag) for v in spec.defaults.values()}
    if len(values) == 1:
        value = values.pop()
        return value if not variants or len(spec.defaults) >= variants else f"{value} ({', '.join(spec.defaults)})"
    return ", ".join(f"{name} {shown_value(v, spec.flag)}" for name, v in spec.defaults.items())


#: Installed packages add variants through one entry-point group per axis: ``mlm_pipeline.<axis package>``
#: (``mlm_pipeline.objectives``, ``mlm_pipeline.writers``, ...); an entry point names a class or a module.
ENTRY_POINT_PREFIX = "mlm_pipeline."


class PluginError(Exception):
    """An installed plugin's entry point cannot be loaded or gives no usable variant: one line, naming it."""


def entry_point_group(package: str) -> str:
    """The entry-point group of the axis whose built-in variants live in ``package``."""
    return ENTRY_POINT_PREFIX + package.rsplit(".", 1)[-1]


V = typing.TypeVar("V")


class _Found(typing.Generic[V]):
    """An axis's variants, found on the first call for each ``sys.path``: a changed path (a plugin's directory
    added, or taken away again) finds them again, as the entry points are scanned again.  ``cache_clear()``
    forgets them and the installed packages' entry points, so a plugin installed since (also into a directory
    already on sys.path, as pip does into site-packages) is found by the next call."""

    def __init__(self, find: Callable[[], dict[str, type[V]]]):
        self._find = find
        self._found: tuple[tuple[str, ...], dict[str, type[V]]] | None = None

    def __call__(self) -> dict[str, type[V]]:
        import sys

        path = tuple(sys.path)
        if self._found is None or self._found[0] != path:
            self._found = (path, self._find())
        return self._found[1]

    def cache_clear(self) -> None:
        import importlib

        self._found = None
        _installed_entry_points.cache_clear()
        importlib.invalidate_caches()  # the import system's view of the directories, as after any install


class Registry(typing.Generic[V]):
    """One axis's variants by name: ``variants()`` finds them once (:func:`discover`: the package's modules
    and its entry-point group), ``named`` looks one up or says, in one line, which there are.  Every axis
    package makes one and exports its two methods under the axis's own names (``readers``, ``reader_named``)."""

    def __init__(self, package: str, base: type, kind: str, also_known: Iterable[str] = ()):  # base: abstract
        self.package = package
        self.base = base
        self.kind = kind  # what users call a variant, for the error: "input format", "objective", ...
        self.also_known = tuple(also_known)  # names the axis takes beside its variants ("auto", "none")
        self.variants = _Found(self._discover)  # .cache_clear() after installing a plugin

    def _discover(self) -> dict[str, type[V]]:
        return discover(self.package, self.base)

    def named(self, name: str) -> type[V]:
        try:
            return self.variants()[name]
        except KeyError:
            known = ", ".join([*self.also_known, *sorted(self.variants())])
            raise ValueError(f"unknown {self.kind} {name!r} (known: {known})") from None


def discover(package: str, base: type) -> dict[str, type]:
    """Every concrete ``base`` subclass with a ``name`` in the modules of
    ``package``, and in the entry points of its group from installed
    packages, by name: a new variant is a new module (here or in a plugin),
    nothing else.  Two variants of one name are refused, naming both."""
    import importlib
    import inspect
    import pkgutil

    found: dict[str, type] = {}

    def add(value: Any) -> None:  # a variant class: its ``name`` is read
        previous = found.setdefault(value.name, value)
        if previous is not value:
            raise TypeError(f"two {base.__name__}s named {value.name!r}: {_where(previous)} and {_where(value)}")

    def variants_in(module: ModuleType) -> list[type]:
        return [value for _, value in inspect.getmembers(module, inspect.isclass)
                if issubclass(value, base) and not inspect.isabstract(value) and "name" in vars(value)]

    root = importlib.import_module(package)
    for module_info in sorted(pkgutil.iter_modules(root.__path__), key=lambda m: m.name):
        for value in variants_in(importlib.import_module(f"{package}.{module_info.name}")):
            add(value)
    for value in _plugin_variants(entry_point_group(package), base, variants_in):
        add(value)
    return found


def _where(variant: type) -> str:
    return f"{variant.__module__}.{variant.__qualname__}"


@functools.lru_cache(maxsize=4)
def _installed_entry_points(path: tuple[str, ...]) -> SelectableGroups:  # Python 3.11's type (3.12: EntryPoints)
    """The entry points of the distributions installed on ``path`` (``sys.path``, the cache's key), from one
    scan: a scan reads each distribution's metadata (~15 ms with a training machine's packages), and every
    process discovers eight axes.  A changed ``sys.path`` is scanned again."""
    import importlib.metadata

    return importlib.metadata.entry_points()


def _entry_points(group: str) -> EntryPoints:
    import sys

    return _installed_entry_points(tuple(sys.path)).select(group=group)


def _plugin_variants(group: str, base: type, variants_in: Callable[[ModuleType], list[type]]) -> list[type]:
    """The variants the installed distributions' entry points in ``group`` name."""
    import inspect

    variants = []
    for entry_point in sorted(_entry_points(group), key=lambda e: (e.name, e.value)):
        source = f"entry point {entry_point.name} = {entry_point.value} (group {group}" + (
            f", from {entry_point.dist.name} {entry_point.dist.version})" if entry_point.dist else ")")
        try:
            loaded = entry_point.load()
        except Exception as error:  # any import-time failure of someone else's package
            raise PluginError(f"{source} cannot be loaded: {type(error).__name__}: {error}") from error
        if inspect.ismodule(loaded):
            found = variants_in(loaded)
        elif inspect.isclass(loaded) and issubclass(loaded, base) and "name" in vars(loaded) \
                and not inspect.isabstract(loaded):
            found = [loaded]
        else:
            found = []
        if not found:
            raise PluginError(f"{source} gives no {base.__name__} (a class with a name, or a module holding one)")
        variants.extend(found)
    return variants
