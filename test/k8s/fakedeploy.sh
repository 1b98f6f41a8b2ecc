# fakedeploy.sh — sourced by the runs of test/k8s that deploy the shipped
# manifests for the fake driver's 8 GiB GPU (dp_burst_run.sh, qos_run.sh,
# dra_burst_run.sh, dra_qos_run.sh):
#   fake_deploy ROOT DIR NODE_IP MANIFEST [KEY=VALUE...]
# renders manifests/MANIFEST (gshare.yaml: device plugin; gshare-dra.yaml:
# DRA) through fakegpu.py with the agent's config keys given (apiServer set
# to NODE_IP: the cluster has no kube-proxy), applies it, restarts the
# DaemonSet and waits until the node advertises gshare.io/gpumem (device
# plugin) or a ResourceSlice of gpumem.gshare.io is published (DRA).
fake_deploy() {
  local root=$1 d=$2 ip=$3 manifest=$4; shift 4
  /usr/bin/python3 $root/test/k8s/fakegpu.py $root/manifests/$manifest $d 8Gi > $d/gs.yaml
  /usr/bin/python3 - "$d/gs.yaml" "$ip" "$@" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    if d["kind"] == "ConfigMap":
        cfg = yaml.safe_load(d["data"]["config.yaml"])
        cfg["apiServer"] = "https://%s:6443" % sys.argv[2]
        cfg.update(kv.split("=", 1) for kv in sys.argv[3:])
        d["data"]["config.yaml"] = yaml.safe_dump(cfg)
yaml.safe_dump_all(docs, open(sys.argv[1], "w"))
PY
  kubectl label node --all nvidia.com/gpu.present=true --overwrite >/dev/null
  kubectl apply -f $d/gs.yaml >/dev/null 2>&1
  kubectl -n kube-system rollout restart ds/gshare >/dev/null 2>&1
  kubectl -n kube-system rollout status ds/gshare >/dev/null
  for _ in $(seq 100); do
    if [[ $manifest == *dra* ]]; then
      kubectl get resourceslice -o name 2>/dev/null | grep -q gpumem && break
    else
      [[ $(kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}') -gt 0 ]] 2>/dev/null && break
    fi
    sleep 0.3
  done
}
