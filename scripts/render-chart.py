#!/usr/bin/python3
"""Renders charts/gshare the way `helm template` does, for the small subset of
Go templates and Helm functions the chart uses, without Helm.

  render-chart.py CHART_DIR [--release NAME] [--namespace NS] [--set key=value ...]

prints every document, ordered by kind as Helm installs them.  `make manifest`
writes manifests/gshare.yaml with it (release gshare, namespace kube-system,
the default values), and test/install/test_chart.py checks that the file is
current, so the chart and the manifest cannot drift apart.

Supported: {{ }} with - trimming; if/else, range, with, define, end;
pipelines; fields of . and $; string and number literals; parentheses; the
functions default, quote, nindent, indent, toYaml, sha256sum, splitList, last,
kindIs, include, print, trim; .Files.Get of a file of the chart.  Anything else is an error naming the template
and the action, so a chart change that needs more fails loudly here.
"""
import hashlib
import json
import os
import re
import sys

import yaml


class TemplateError(Exception):
    pass


# ---- lexing and parsing ----

ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)


def lex(name, text):
    """[('text', s) | ('action', s)], with Go's whitespace trimming applied."""
    out = []
    pos = 0
    trim_next = False
    for m in ACTION.finditer(text):
        t = text[pos:m.start()]
        if trim_next:
            t = t.lstrip(" \t\r\n")
        if m.group(1):
            t = t.rstrip(" \t\r\n")
        out.append(("text", t))
        out.append(("action", m.group(2).strip()))
        trim_next = bool(m.group(3))
        pos = m.end()
    t = text[pos:]
    out.append(("text", t.lstrip(" \t\r\n") if trim_next else t))
    return out


TOKEN = re.compile(r'\s*(?:("(?:[^"\\]|\\.)*")|(\()|(\))|(\|)|(\$?[A-Za-z0-9_.$]+|\.)|(\S))')


def tokens(name, src):
    out = []
    pos = 0
    while pos < len(src):
        m = TOKEN.match(src, pos)
        if not m or m.end() == pos:
            break
        if m.group(6):
            raise TemplateError("%s: unexpected %r in {{ %s }}" % (name, m.group(6), src))
        for kind, g in zip(("str", "(", ")", "|", "word"), m.groups()[:5]):
            if g is not None:
                out.append((kind, g))
        pos = m.end()
    return out


def parse_pipeline(name, toks):
    """A pipeline: list of commands; a command: list of operands; an operand:
    ('str', s) | ('num', n) | ('field', base, path) | ('fn', name) |
    ('pipe', pipeline)."""
    pos = 0

    def operand():
        nonlocal pos
        kind, v = toks[pos]
        pos += 1
        if kind == "str":
            return ("str", json.loads(v))
        if kind == "(":
            start = pos
            depth = 1
            while depth:
                if pos >= len(toks):
                    raise TemplateError("%s: unbalanced ( in a pipeline" % name)
                if toks[pos][0] == "(":
                    depth += 1
                elif toks[pos][0] == ")":
                    depth -= 1
                pos += 1
            return ("pipe", parse_pipeline(name, toks[start:pos - 1]))
        if kind == "word":
            if re.fullmatch(r"-?[0-9]+", v):
                return ("num", int(v))
            if v in ("true", "false"):
                return ("lit", v == "true")
            if v == ".":
                return ("field", ".", [])
            if v.startswith("."):
                return ("field", ".", v[1:].split("."))
            if v == "$":
                return ("field", "$", [])
            if v.startswith("$."):
                return ("field", "$", v[2:].split("."))
            if v in FUNCS:
                return ("fn", v)
            raise TemplateError("%s: unknown function or value %r" % (name, v))
        raise TemplateError("%s: unexpected %r" % (name, v))

    cmds = [[]]
    while pos < len(toks):
        if toks[pos][0] == "|":
            pos += 1
            cmds.append([])
            continue
        cmds[-1].append(operand())
    if any(not c for c in cmds):
        raise TemplateError("%s: empty command in a pipeline" % name)
    return cmds


def parse(name, text):
    """Parses a template file into a node list; returns (nodes, defines)."""
    items = lex(name, text)
    defines = {}
    pos = 0

    def block(stop):
        nonlocal pos
        nodes = []
        while pos < len(items):
            kind, v = items[pos]
            pos += 1
            if kind == "text":
                if v:
                    nodes.append(("text", v))
                continue
            if v.startswith("/*"):
                continue
            word = v.split(None, 1)[0]
            rest = v[len(word):].strip()
            if word in ("end", "else"):
                if word not in stop:
                    raise TemplateError("%s: unexpected {{ %s }}" % (name, v))
                return nodes, word
            if word in ("if", "range", "with"):
                cond = parse_pipeline(name, tokens(name, rest))
                body, ended = block(("end", "else"))
                other = []
                if ended == "else":
                    other, _ = block(("end",))
                nodes.append((word, cond, body, other))
            elif word == "define":
                dname = json.loads(rest)
                body, _ = block(("end",))
                defines[dname] = body
            else:
                nodes.append(("out", parse_pipeline(name, tokens(name, v))))
        if stop:
            raise TemplateError("%s: missing {{ end }}" % name)
        return nodes, None

    nodes, _ = block(())
    return nodes, defines


# ---- evaluation ----

def truthy(v):
    return not (v is None or v is False or v == 0 and not isinstance(v, bool) or v in ("", [], {}))


def to_str(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def to_yaml(v):
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")


def indent(n, s):
    pad = " " * n
    return pad + s.replace("\n", "\n" + pad)


def kind_of(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float64"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "slice"
    if isinstance(v, dict):
        return "map"
    return "invalid"


FUNCS = {
    "default": lambda d, v=None: v if truthy(v) else d,
    "quote": lambda *a: " ".join(json.dumps(to_str(x)) for x in a),
    "nindent": lambda n, s: "\n" + indent(n, to_str(s)),
    "indent": lambda n, s: indent(n, to_str(s)),
    "toYaml": to_yaml,
    "sha256sum": lambda s: hashlib.sha256(to_str(s).encode()).hexdigest(),
    "splitList": lambda sep, s: to_str(s).split(sep),
    "last": lambda v: v[-1] if v else None,
    "kindIs": lambda k, v: kind_of(v) == k,
    "print": lambda *a: "".join(to_str(x) for x in a),
    "trim": lambda s: to_str(s).strip(),
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "include": None,  # needs the renderer: see Renderer.call
}


class Renderer:
    def __init__(self, chart_dir, values, release, namespace):
        with open(os.path.join(chart_dir, "Chart.yaml")) as f:
            chart = yaml.safe_load(f)
        self.name = chart["name"]
        self.root = {
            "Values": values,
            "Release": {"Name": release, "Namespace": namespace, "Service": "Helm"},
            "Chart": {"Name": chart["name"], "Version": chart["version"],
                      "AppVersion": chart.get("appVersion", "")},
            "Template": {"BasePath": self.name + "/templates"},
        }
        self.root["Files"] = {"Get": lambda path: self.get_file(chart_dir, path)}
        self.templates = {}
        self.defines = {}
        tdir = os.path.join(chart_dir, "templates")
        for fn in sorted(os.listdir(tdir)):
            if not (fn.endswith(".yaml") or fn.endswith(".tpl")):
                continue
            tname = "%s/templates/%s" % (self.name, fn)
            with open(os.path.join(tdir, fn)) as f:
                nodes, defs = parse(tname, f.read())
            self.templates[tname] = nodes
            self.defines.update(defs)

    @staticmethod
    def get_file(chart_dir, path):
        """.Files.Get: a file of the chart, outside templates/, as text ("" if
        there is none, as Helm does)."""
        full = os.path.abspath(os.path.join(chart_dir, path))
        if not full.startswith(os.path.abspath(chart_dir) + os.sep) or path.startswith("templates/"):
            return ""
        try:
            with open(full) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def field(self, base, path, dot, name):
        v = self.root if base == "$" else dot
        for p in path:
            if isinstance(v, dict) and p in v:
                v = v[p]
            elif isinstance(v, dict) or v is None:
                v = None
            else:
                raise TemplateError("%s: cannot take .%s of %r" % (name, p, v))
        return v

    def value(self, op, dot, name):
        kind = op[0]
        if kind in ("str", "num", "lit"):
            return op[1]
        if kind == "field":
            return self.field(op[1], op[2], dot, name)
        if kind == "pipe":
            return self.pipeline(op[1], dot, name)
        raise TemplateError("%s: %s used as a value" % (name, op[1]))

    def call(self, fname, args, name):
        if fname == "include":
            tname, ctx = args
            nodes = self.defines.get(tname, self.templates.get(tname))
            if nodes is None:
                raise TemplateError("%s: include of unknown template %r" % (name, tname))
            return self.exec(nodes, ctx, tname)
        try:
            return FUNCS[fname](*args)
        except TypeError as e:
            raise TemplateError("%s: %s: %s" % (name, fname, e))

    def pipeline(self, cmds, dot, name):
        prev = None
        for i, cmd in enumerate(cmds):
            head = cmd[0]
            if head[0] == "fn":
                args = [self.value(op, dot, name) for op in cmd[1:]]
                if i > 0:
                    args.append(prev)
                prev = self.call(head[1], args, name)
            else:
                v = self.value(head, dot, name)
                if callable(v):  # a method: .Files.Get "path"
                    args = [self.value(op, dot, name) for op in cmd[1:]] + ([prev] if i > 0 else [])
                    prev = v(*args)
                    continue
                if len(cmd) > 1 or i > 0:
                    raise TemplateError("%s: a value cannot take arguments" % name)
                prev = v
        return prev

    def exec(self, nodes, dot, name):
        out = []
        for n in nodes:
            kind = n[0]
            if kind == "text":
                out.append(n[1])
            elif kind == "out":
                out.append(to_str(self.pipeline(n[1], dot, name)))
            elif kind == "if":
                out.append(self.exec(n[2] if truthy(self.pipeline(n[1], dot, name)) else n[3], dot, name))
            elif kind == "with":
                v = self.pipeline(n[1], dot, name)
                out.append(self.exec(n[2], v, name) if truthy(v) else self.exec(n[3], dot, name))
            elif kind == "range":
                v = self.pipeline(n[1], dot, name)
                if truthy(v):
                    items = v.values() if isinstance(v, dict) else v
                    for x in items:
                        out.append(self.exec(n[2], x, name))
                else:
                    out.append(self.exec(n[3], dot, name))
        return "".join(out)

    def render(self):
        """{template name: rendered text} for the .yaml templates."""
        return {t: self.exec(nodes, self.root, t) for t, nodes in self.templates.items()
                if t.endswith(".yaml")}


# Helm's install order (pkg/releaseutil/kind_sorter.go), the kinds we use.
KIND_ORDER = ["Namespace", "ServiceAccount", "Secret", "ConfigMap", "ClusterRole",
              "ClusterRoleBinding", "Role", "RoleBinding", "Service", "DaemonSet",
              "Deployment"]


def documents(rendered):
    """[(source template, document text)] in Helm's install order."""
    docs = []
    for t in sorted(rendered):
        for d in re.split(r"(?m)^---\s*$", rendered[t]):
            if not d.strip():
                continue
            obj = yaml.safe_load(d)
            kind = obj.get("kind", "") if isinstance(obj, dict) else ""
            rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
            docs.append((rank, t, d.strip("\n")))
    docs.sort(key=lambda x: (x[0], x[1]))
    return [(t, d) for _, t, d in docs]


def set_value(values, key, raw):
    v = values
    parts = key.split(".")
    for p in parts[:-1]:
        v = v.setdefault(p, {})
    v[parts[-1]] = yaml.safe_load(raw)


def render_chart(chart_dir, release="gshare", namespace="kube-system", sets=()):
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for kv in sets:
        k, _, raw = kv.partition("=")
        set_value(values, k, raw)
    r = Renderer(chart_dir, values, release, namespace)
    return documents(r.render())


MANIFEST_HEADER = """\
# gshare without Helm: charts/gshare rendered with its default values,
# release "gshare", namespace kube-system.
#   kubectl apply -f manifests/gshare.yaml
# Generated by `make manifest` (scripts/render-chart.py): edit the chart and
# regenerate, never this file (test/install/test_chart.py checks it is current).
# To change a value (image, metricsAddress, ...), use Helm or edit a copy.
"""


MONITORING_HEADER = """\
# gshare's monitoring without Helm: the monitoring objects of charts/gshare
# (templates/monitoring.yaml) rendered with every option on, release
# "gshare", namespace kube-system: the Grafana dashboard's ConfigMap (label
# grafana_dashboard: "1"), a PodMonitor and a PrometheusRule (these two need
# the Prometheus Operator's CRDs).  The agents need metricsAddress set
# (docs/metrics.md).
#   kubectl apply -f manifests/gshare-monitoring.yaml
# Generated by `make manifest` (scripts/render-chart.py): edit the chart and
# regenerate, never this file (test/install/test_chart.py checks it is current).
"""

MONITORING_SETS = ["config.metricsAddress=0.0.0.0:9400", "monitoring.dashboard.enabled=true",
                   "monitoring.podMonitor.enabled=true", "monitoring.prometheusRule.enabled=true"]


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("chart")
    ap.add_argument("--release", default="gshare")
    ap.add_argument("--namespace", default="kube-system")
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--manifest", action="store_true",
                    help="start with the header of manifests/gshare.yaml")
    ap.add_argument("--template", help="only the documents of this template (e.g. monitoring.yaml)")
    a = ap.parse_args(argv)
    try:
        docs = render_chart(a.chart, a.release, a.namespace, a.set)
    except (TemplateError, yaml.YAMLError, OSError) as e:
        print("render-chart: %s" % e, file=sys.stderr)
        return 1
    if a.template:
        docs = [(t, d) for t, d in docs if t.endswith("/templates/" + a.template)]
    if a.manifest and a.template == "monitoring.yaml":
        sys.stdout.write(MONITORING_HEADER)
    elif a.manifest and a.set:
        # manifests/gshare-dra.yaml and the like: say which values differ.
        sys.stdout.write(MANIFEST_HEADER.replace("with its default values,", "with its default values and\n# --set %s," % " --set ".join(a.set)).replace("gshare.yaml", "gshare-%s.yaml" % "-".join(v.split("=", 1)[1] for v in a.set)))
    elif a.manifest:
        sys.stdout.write(MANIFEST_HEADER)
    for t, d in docs:
        sys.stdout.write("---\n# Source: %s\n%s\n" % (t, d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
