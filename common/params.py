"""Components and their parameters: how a reader, an objective or a writer
is named in the job, configured from the command line, and shipped.

Every axis of the pipeline (reader, objective, writer) is a set of
components found by name.  A component declares its parameters as a frozen
dataclass (``Params``) whose fields carry their command-line help in the
field metadata.  The ventilator builds its command-line options from those
dataclasses, so a new component brings its own flags, and the job carries
the chosen component as a :class:`Component` (a name and a flat mapping of
scalar values), so neither the roles nor the wire protocol know any
component's parameters.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

#: What a parameter may hold: the wire carries these as they are.
ParamValue = typing.Union[bool, int, float, str]


@dataclass(frozen=True)
class Component:
    """One module of an axis, by name, with its parameters as plain values."""

    name: str
    params: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True)
class NoParams:
    """The parameters of a component that has none."""


def param(default: Any, help: str, flag: str = "") -> Any:  # noqa: A002 (click's word)
    """A Params field with its command-line help (and, rarely, its own flag name)."""
    return field(default=default, metadata={"help": help, "flag": flag})


class Configurable:
    """A component: its ``name`` and a ``Params`` dataclass; ``params`` is
    the instance built from the job."""

    name: ClassVar[str]
    Params: ClassVar[type]

    @classmethod
    def make_params(cls, given: dict[str, ParamValue]):
        """The Params from the values given (the rest keep their defaults),
        checked (``validate``, if the class has one): ValueError otherwise."""
        names = {f.name for f in dataclasses.fields(cls.Params)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"{', '.join(flag_of(cls.Params, n) for n in unknown)} does not apply to "
                             f"{cls.name} (its options: {', '.join(flag_of(cls.Params, n) for n in sorted(names)) or 'none'})")
        params = cls.Params(**{name: _coerce(cls.Params, name, value) for name, value in given.items()})
        validate = getattr(params, "validate", None)
        if validate is not None:
            validate()
        return params

    @classmethod
    def component(cls, params) -> Component:
        """The job's record of this component with ``params``: every field,
        so a later change of a default cannot change what a job means."""
        return Component(cls.name, dataclasses.asdict(params))


def _coerce(params_class: type, name: str, value: ParamValue) -> ParamValue:
    """Ints given for float fields become floats, so equal settings make equal jobs."""
    hint = typing.get_type_hints(params_class)[name]
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def flag_of(params_class: type, name: str) -> str:
    for f in dataclasses.fields(params_class):
        if f.name == name and f.metadata.get("flag"):
            return f.metadata["flag"]
    return "--" + name.replace("_", "-")


@dataclass
class OptionSpec:
    """One command-line option shared by every component that has the field."""

    name: str
    flag: str
    type: type
    help: str
    defaults: dict[str, Any]  # component name -> its default
    declared_by: str = ""  # the first component with the field, to name in a clash


class ParamClash(Exception):
    """Two components (a plugin's, say) give one option different types: it cannot be one flag."""


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _described(component: type) -> str:
    return f"{component.name!r} ({component.__module__}.{component.__qualname__})"


def option_specs(components: Iterable[type[Configurable]]) -> list[OptionSpec]:
    """The union of the components' parameters, one option per field name.
    Two components that share a field name must give it the same type: otherwise ParamClash, naming both."""
    specs: dict[str, OptionSpec] = {}
    for component in components:
        hints = typing.get_type_hints(component.Params)
        for f in dataclasses.fields(component.Params):
            spec = specs.get(f.name)
            if spec is None:
                spec = specs[f.name] = OptionSpec(f.name, flag_of(component.Params, f.name), hints[f.name],
                                                  f.metadata.get("help", ""), {}, _described(component))
            elif spec.type is not hints[f.name]:
                raise ParamClash(f"{spec.flag} is declared {_type_name(spec.type)} by {spec.declared_by} and "
                                 f"{_type_name(hints[f.name])} by {_described(component)}: "
                                 f"variants share one flag per parameter name, so rename one of them")
            spec.defaults[component.name] = f.default
    return list(specs.values())


def defaults_text(spec: OptionSpec) -> str:
    values = {repr(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v)
              for v in spec.defaults.values()}
    if len(values) == 1:
        return f"[default: {values.pop()}]"
    return "[default: " + ", ".join(f"{name} {v}" for name, v in spec.defaults.items()) + "]"


def discover(package: str, base: type) -> dict[str, type]:
    """Every concrete ``base`` subclass with a ``name`` in the modules of
    ``package``, by name: a new component is a new module, nothing else."""
    import importlib
    import inspect
    import pkgutil

    found: dict[str, type] = {}
    root = importlib.import_module(package)
    for module_info in sorted(pkgutil.iter_modules(root.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package}.{module_info.name}")
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, base) and not inspect.isabstract(value) and "name" in vars(value):
                previous = found.setdefault(value.name, value)
                if previous is not value:
                    raise TypeError(f"two {base.__name__}s named {value.name!r}: {previous} and {value}")
    return found
