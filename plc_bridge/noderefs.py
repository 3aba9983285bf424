"""Node references of the node map: NodeIds and browse paths, with namespaces by index or by URI.

- NodeId: `ns=3;s=DB10.Obs`, `ns=2;i=1005`, `i=2258`, or with the namespace's URI instead of its
  index: `nsu=http://www.siemens.com/simatic-s7-opcua;s="DB_RL"."Obs"`.
- Browse path from the Objects folder, steps separated by `/`, each `<ns index>:<BrowseName>` or
  `nsu=<uri>;<BrowseName>`: `3:RL/3:Obs_0`, `nsu=urn:plc;RL/nsu=urn:plc;Obs_0`.

A namespace index is the server's choice and can move when the PLC's project changes (another
namespace registered first); a URI cannot. So `nsu=` references are parsed here, once, and resolved
against the server's NamespaceArray at every connect.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from dataclasses import dataclass

from asyncua import ua

from rl2edge.errors import ConfigError, short_repr

_NODEID = re.compile(r"^(?:ns=(?P<ns>\d+);|nsu=(?P<uri>[^;]+);)?(?P<id>[sigb]=.*)$", re.S)
_STEP_SPLIT = re.compile(r"/(?=\d+:|nsu=)")
_STEP = re.compile(r"^(?:(?P<ns>\d+):|nsu=(?P<uri>[^;]+);)(?P<name>.+)$", re.S)


@dataclass(frozen=True)
class Namespace:
    """A namespace by index, or by URI (resolved at connect)."""

    index: int | None = None
    uri: str | None = None

    def resolve(self, namespaces: list[str], ref: str) -> int:
        if self.uri is None:
            assert self.index is not None
            return self.index
        try:
            return namespaces.index(self.uri)
        except ValueError:
            raise ConfigError(
                f"{ref}: the server has no namespace {self.uri!r} (its NamespaceArray: {', '.join(namespaces)}); "
                "check the namespace URI in the node map"
            ) from None


def identity(node_id: ua.NodeId) -> tuple[int, str, object]:
    """One key per node, however its NodeId was obtained: (namespace index, kind, identifier). A NodeId parsed
    from `s=...` holds a ua.String, one the server returns from a browse a plain str; numeric identifiers come
    as TwoByte, FourByte or Numeric encodings of one int. Compared by type name, one node had two keys (serve's
    own heartbeat was accepted as observation_seq through its browse path)."""
    ident = node_id.Identifier
    if isinstance(ident, bool) or not isinstance(ident, (int, str, bytes)):
        return node_id.NamespaceIndex, "g", str(ident)  # a Guid
    if isinstance(ident, int):
        return node_id.NamespaceIndex, "i", int(ident)
    if isinstance(ident, bytes):
        return node_id.NamespaceIndex, "b", bytes(ident)
    return node_id.NamespaceIndex, "s", str(ident)


@dataclass(frozen=True)
class NodeRef:
    text: str
    """As written in the node map: every message names it so."""
    namespace: Namespace
    identifier: str | None = None
    """NodeId: the identifier part (`s=...`, `i=...`); None for a browse path."""
    path: tuple[tuple[Namespace, str], ...] = ()
    """Browse path: (namespace, BrowseName) steps from the Objects folder."""

    def same_node_key(self) -> Hashable:
        """What two references to one node share when written alike up to spelling (`ns=2;s=X` and
        `ns=2;s=X ` or `ns=2;i=7` and `ns=2;i=0007`); `nsu=` against `ns=` forms, and browse paths against
        NodeIds, are compared once resolved at connect (plc_bridge.binding)."""
        if self.identifier is not None:
            return ("id", self.namespace, identity(ua.NodeId.from_string(self.identifier))[1:])
        return ("path", self.path)

    def node_id(self, namespaces: list[str]) -> ua.NodeId:
        assert self.identifier is not None
        parsed = ua.NodeId.from_string(self.identifier)
        return ua.NodeId(parsed.Identifier, self.namespace.resolve(namespaces, self.text), parsed.NodeIdType)

    def browse_path(self, namespaces: list[str]) -> list[ua.QualifiedName]:
        return [ua.QualifiedName(name, ns.resolve(namespaces, self.text)) for ns, name in self.path]


def _namespace(ns: str | None, uri: str | None) -> Namespace:
    return Namespace(uri=uri) if uri is not None else Namespace(index=int(ns or 0))


def parse_ref(text: str, key: str) -> NodeRef:
    """Parse once when the map is loaded; ConfigError naming the key if it is neither form."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{key}: a node reference must be a non-empty string, got {short_repr(text)}")
    text = text.strip()
    m = _NODEID.match(text)
    if m:
        try:
            ua.NodeId.from_string(m["id"])
        except Exception:
            raise ConfigError(f"{key}: {short_repr(text)} is not a valid NodeId") from None
        return NodeRef(text, _namespace(m["ns"], m["uri"]), identifier=m["id"])
    steps = []
    for step in _STEP_SPLIT.split(text):
        s = _STEP.match(step)
        if not s:
            raise ConfigError(
                f"{key}: {short_repr(text)} is neither a NodeId (ns=3;s=Name, nsu=<uri>;s=Name) nor a browse path "
                "(3:Folder/3:Name or nsu=<uri>;Folder/nsu=<uri>;Name)"
            )
        steps.append((_namespace(s["ns"], s["uri"]), s["name"]))
    return NodeRef(text, steps[-1][0], path=tuple(steps))
