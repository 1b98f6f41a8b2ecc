#!/usr/bin/python3
"""The chart and the manifest cannot drift apart, and the chart's paths agree.

- manifests/gshare.yaml is exactly charts/gshare rendered with its default
  values by scripts/render-chart.py (`make manifest` regenerates it);
- the renderer handles the template constructs the chart uses with other
  values (metricsAddress, a device list, runtimeClassName, an image tag,
  another hook directory) and refuses what it does not know;
- the monitoring options (docs/metrics.md), each on and off: the dashboard's
  ConfigMap (the sidecar's label, the dashboard JSON as shipped), the
  PodMonitor (the agents' metrics port, honorLabels), the PrometheusRule
  (the alerts file as shipped); manifests/gshare-monitoring.yaml is the
  render with all on;
- for the default and the changed values, the DaemonSet's mounts agree with
  the config: every path the agent and the plugin use is inside a volume
  they mount, and the init container's host directory is mounted under /host,
  never over the image's /usr/local/lib/gshare.
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
spec = importlib.util.spec_from_file_location("render_chart", os.path.join(REPO, "scripts", "render-chart.py"))
rc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rc)
CHART = os.path.join(REPO, "charts", "gshare")

failures = []


def check(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what + ("" if cond or not detail else "  [%s]" % (detail,)), flush=True)
    if not cond:
        failures.append(what)
    return cond


def finish():
    """Ends a test program: exit 1 if a check failed."""
    if failures:
        print("%d checks failed" % len(failures))
        sys.exit(1)
    print("all checks passed")


def text_of(docs, header=True):
    return (rc.MANIFEST_HEADER if header else "") + "".join(
        "---\n# Source: %s\n%s\n" % (t, d) for t, d in docs)


def objects(docs):
    return {(o["kind"], o["metadata"]["name"]): o for o in (yaml.safe_load(d) for _, d in docs)}


def under(path, d):
    return path == d or path.startswith(d.rstrip("/") + "/")


def check_paths(objs, what):
    ds = [o for k, o in objs.items() if k[0] == "DaemonSet"][0]
    spec = ds["spec"]["template"]["spec"]
    cm = [o for k, o in objs.items() if k[0] == "ConfigMap"][0]
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    vols = {v["name"]: v for v in spec["volumes"]}
    ctrs = {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}

    def host_dirs(c):
        """{host path of the volume: path in the container} for c's hostPath mounts."""
        out = {}
        for m in c.get("volumeMounts", []):
            v = vols.get(m["name"])
            if not check(v is not None, "%s: %s mounts declared volume %s" % (what, c["name"], m["name"])):
                continue
            if "hostPath" in v:
                out[v["hostPath"]["path"]] = m["mountPath"]
        return out

    def seen_at_same_path(c, path, key):
        hd = host_dirs(c)
        ok = any(under(path, h) and hd[h] == h for h in hd)
        check(ok, "%s: %s sees %s %s at the same path as the host" % (what, c["name"], key, path), hd)

    agent, plugin, init = ctrs["agent"], ctrs["device-plugin"], ctrs["install-hook"]
    for key in ("agentSocket", "socketRoot", "stateDir", "podResourcesSocket"):
        seen_at_same_path(agent, cfg[key], key)
    for key in ("agentSocket", "kubeletDir"):
        seen_at_same_path(plugin, cfg[key], key)
    for c in (agent, plugin):
        check(any(m["mountPath"] == "/etc/gshare" and "configMap" in vols[m["name"]]
                  for m in c["volumeMounts"]) and "/etc/gshare/config.yaml" in c["command"],
              "%s: %s reads the ConfigMap at /etc/gshare/config.yaml" % (what, c["name"]))
    libdir = os.path.dirname(cfg["hookPath"])
    check(os.path.dirname(cfg["preloadPath"]) == libdir, "%s: hookPath and preloadPath in one directory" % what)
    hd = host_dirs(init)
    dest = init["command"][-1]
    check(hd.get(libdir) == dest and dest == "/host" + libdir,
          "%s: init container installs into the host's %s mounted at /host%s" % (what, libdir, libdir), (hd, dest))
    check(not any(under("/usr/local/lib/gshare", p) or under(p, "/usr/local/lib/gshare")
                  for p in hd.values()),
          "%s: nothing is mounted over the image's /usr/local/lib/gshare" % what, hd)


def check_dra(docs, sets_text):
    """mode dra: the DRA plugin instead of the device plugin, its host
    directories at the host's paths, RBAC for claims and slices, the
    DeviceClass; manifests/gshare-dra.yaml is that render."""
    with open(os.path.join(REPO, "manifests", "gshare-dra.yaml")) as f:
        check(f.read() == sets_text, "manifests/gshare-dra.yaml is the chart rendered with mode=dra (else: make manifest)")
    objs = objects(docs)
    check(sorted(k[0] for k in objs) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "DeviceClass",
                                         "ServiceAccount"], "mode dra: the five objects and a DeviceClass", sorted(objs))
    dc = objs.get(("DeviceClass", "gpumem.gshare.io"), {})
    check(dc.get("apiVersion") == "resource.k8s.io/v1" and dc.get("spec", {}).get("selectors") ==
          [{"cel": {"expression": 'device.driver == "gpumem.gshare.io"'}}], "DeviceClass selects the driver", dc)
    spec = objs[("DaemonSet", "gshare")]["spec"]["template"]["spec"]
    ctrs = {c["name"]: c for c in spec["containers"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    check(sorted(ctrs) == ["agent", "dra-plugin"] and "device-plugins" not in vols,
          "mode dra: agent and dra-plugin, no device-plugin", sorted(ctrs))
    dp = ctrs.get("dra-plugin", {})
    cmd = dp.get("command", [])
    check(cmd[:3] == ["/usr/local/bin/gshare-dra-plugin", "--config", "/etc/gshare/config.yaml"]
          and any(e.get("name") == "NODE_NAME" for e in dp.get("env", [])), "dra-plugin command and NODE_NAME", cmd)
    mounts = {m["name"]: m["mountPath"] for m in dp.get("volumeMounts", [])}
    for flag, vol in (("--registry-dir", "kubelet-plugins-registry"), ("--plugins-dir", "kubelet-plugins"),
                      ("--cdi-dir", "cdi")):
        arg = cmd[cmd.index(flag) + 1] if flag in cmd else None
        check(arg and mounts.get(vol) == arg == vols[vol]["hostPath"]["path"],
              "dra-plugin %s %s mounted at the host's path" % (flag, arg), (mounts, vols.get(vol)))
    check(mounts.get("run") == "/run/gshare", "dra-plugin reaches the agent's socket directory", mounts)
    rules = objs[("ClusterRole", "gshare-pod-reader")]["rules"]
    check({"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]} in rules and
          any(r["resources"] == ["resourceslices"] and {"get", "create", "patch", "delete"} <= set(r["verbs"])
              for r in rules), "RBAC: get resourceclaims, manage resourceslices", rules)


MONITORING = {"dashboard": ("ConfigMap", "gshare-dashboard"), "podMonitor": ("PodMonitor", "gshare"),
              "prometheusRule": ("PrometheusRule", "gshare")}


def check_monitoring(base_objs):
    """Each monitoring option alone, then all on; off by default."""
    kinds = {k for k in base_objs}
    check(not any(v in kinds for v in MONITORING.values()), "monitoring: nothing by default")
    with open(os.path.join(CHART, "dashboards", "gshare.json")) as f:
        dashboard = json.load(f)
    with open(os.path.join(CHART, "files", "gshare-rules.yaml")) as f:
        rules = yaml.safe_load(f)
    for opt, key in MONITORING.items():
        objs = objects(rc.render_chart(CHART, sets=["config.metricsAddress=0.0.0.0:9400",
                                                    "monitoring.%s.enabled=true" % opt]))
        extra = sorted(set(objs) - set(base_objs))
        check(extra == [key], "monitoring.%s.enabled: exactly %s %s added" % (opt, key[0], key[1]), extra)
        o = objs.get(key, {})
        if opt == "dashboard":
            check(o["metadata"]["labels"].get("grafana_dashboard") == "1" and
                  json.loads(o["data"]["gshare.json"]) == dashboard,
                  "dashboard ConfigMap: label grafana_dashboard \"1\", the dashboard JSON as shipped")
        elif opt == "podMonitor":
            ds = objs[("DaemonSet", "gshare")]
            ep = o["spec"]["podMetricsEndpoints"][0]
            sel = o["spec"]["selector"]["matchLabels"]
            pod_labels = ds["spec"]["template"]["metadata"]["labels"]
            ports = [p["name"] for c in ds["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
            check(ep["port"] in ports and ep["path"] == "/metrics" and ep["honorLabels"] is True and
                  sel.items() <= pod_labels.items() and o["apiVersion"] == "monitoring.coreos.com/v1",
                  "PodMonitor: the agents' metrics port, /metrics, honorLabels, selects the DaemonSet's pods", o)
        else:
            check(o["spec"] == rules and o["apiVersion"] == "monitoring.coreos.com/v1",
                  "PrometheusRule: the alerts file as shipped")
    sets = rc.MONITORING_SETS + ["monitoring.dashboard.namespace=grafana", "monitoring.podMonitor.labels.release=prom"]
    objs = objects(rc.render_chart(CHART, sets=sets))
    check(objs[("ConfigMap", "gshare-dashboard")]["metadata"]["namespace"] == "grafana" and
          objs[("PodMonitor", "gshare")]["metadata"]["labels"].get("release") == "prom",
          "dashboard namespace and PodMonitor labels from values")
    r = subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "render-chart.py"), CHART, "--manifest",
                        "--template", "monitoring.yaml"] + sum((["--set", x] for x in rc.MONITORING_SETS), []),
                       capture_output=True, text=True)
    with open(os.path.join(REPO, "manifests", "gshare-monitoring.yaml")) as f:
        check(r.returncode == 0 and f.read() == r.stdout,
              "manifests/gshare-monitoring.yaml is the monitoring render with every option on (else: make manifest)")


def main():
    docs = rc.render_chart(CHART)
    with open(os.path.join(REPO, "manifests", "gshare.yaml")) as f:
        manifest = f.read()
    check(manifest == text_of(docs),
          "manifests/gshare.yaml is the chart rendered with its defaults (else: make manifest)")
    objs = objects(docs)
    check(sorted(k[0] for k in objs) == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet",
                                         "ServiceAccount"], "default render: the five objects", sorted(objs))
    ds = objs[("DaemonSet", "gshare")]
    spec = ds["spec"]["template"]["spec"]
    check(all(c["image"] == "ghcr.io/gshare/gshare:0.1.0" for c in spec["initContainers"] + spec["containers"]),
          "default image: repository:appVersion")
    check("ports" not in spec["containers"][0] and
          "prometheus.io/scrape" not in ds["spec"]["template"]["metadata"]["annotations"],
          "metricsAddress empty: no port, no scrape annotations")
    check("runtimeClassName" not in spec, "runtimeClassName empty: left out")
    check_paths(objs, "defaults")
    check_monitoring(objs)

    cfg1 = yaml.safe_load(objs[("ConfigMap", "gshare-config")]["data"]["config.yaml"])
    check("burstMax" not in cfg1 and "spillMax" not in cfg1 and "reclaimKillAfter" not in cfg1,
          "burstMax, spillMax, reclaimKillAfter unset: not in the config (an agent of the previous release, restarted "
          "during an upgrade, would refuse the keys)", cfg1)
    sets = ["config.metricsAddress=0.0.0.0:9400", "config.devices=[\"GPU-x\", 1]", "runtimeClassName=nvidia",
            "image.tag=9.9.9", "image.repository=reg.example/gs", "hostPaths.lib=/opt/gshare/lib",
            "config.burstMax=8Gi", "config.spillMax=16Gi", "config.reclaimKillAfter=30s"]
    docs2 = rc.render_chart(CHART, "gs2", "gpu", sets)
    objs2 = objects(docs2)
    ds2 = objs2[("DaemonSet", "gs2")]
    spec2 = ds2["spec"]["template"]["spec"]
    ann = ds2["spec"]["template"]["metadata"]["annotations"]
    check(ann.get("prometheus.io/port") == "9400" and ann.get("prometheus.io/scrape") == "true",
          "metricsAddress set: scrape annotations with its port", ann)
    check(spec2["containers"][0].get("ports") == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}],
          "metricsAddress set: the agent's containerPort", spec2["containers"][0].get("ports"))
    check(spec2.get("runtimeClassName") == "nvidia", "runtimeClassName rendered")
    check(all(c["image"] == "reg.example/gs:9.9.9" for c in spec2["initContainers"] + spec2["containers"]),
          "image repository and tag from values")
    cfg2 = yaml.safe_load(objs2[("ConfigMap", "gs2-config")]["data"]["config.yaml"])
    check(cfg2["devices"] == ["GPU-x", "1"] and cfg2["metricsAddress"] == "0.0.0.0:9400" and cfg2["burstMax"] == "8Gi"
          and cfg2["spillMax"] == "16Gi" and cfg2["reclaimKillAfter"] == "30s",
          "config: device list (range, quote), metricsAddress, burstMax, spillMax, reclaimKillAfter", cfg2)
    check(ds2["metadata"]["namespace"] == "gpu" and objs2[("ClusterRoleBinding", "gs2-pod-reader")]["subjects"][0]
          == {"kind": "ServiceAccount", "name": "gs2", "namespace": "gpu"}, "release name and namespace used")
    check(ann["checksum/config"] != ds["spec"]["template"]["metadata"]["annotations"]["checksum/config"],
          "checksum/config follows the ConfigMap")
    check_paths(objs2, "changed values")

    check(("DeviceClass", "gpumem.gshare.io") not in objs and
          not any("resource.k8s.io" in r["apiGroups"] for r in objs[("ClusterRole", "gshare-pod-reader")]["rules"]),
          "mode deviceplugin (default): no DeviceClass, no resource.k8s.io rights")
    docs3 = rc.render_chart(CHART, sets=["mode=dra"])
    check_dra(docs3, subprocess.run(["/usr/bin/python3", os.path.join(REPO, "scripts", "render-chart.py"), CHART,
                                     "--manifest", "--set", "mode=dra"], capture_output=True, text=True).stdout)

    # The renderer refuses what it does not implement, naming it.
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "templates"))
        with open(os.path.join(d, "Chart.yaml"), "w") as f:
            f.write("name: t\nversion: 0.1.0\nappVersion: '1'\n")
        with open(os.path.join(d, "values.yaml"), "w") as f:
            f.write("a: 1\n")
        with open(os.path.join(d, "templates", "x.yaml"), "w") as f:
            f.write("kind: ConfigMap\nmetadata: {name: {{ .Values.a | upper }}}\n")
        try:
            rc.render_chart(d)
            err = ""
        except rc.TemplateError as e:
            err = str(e)
        check("t/templates/x.yaml" in err and "upper" in err, "unknown function refused, naming template and function",
              err)
    finish()


if __name__ == "__main__":
    main()
