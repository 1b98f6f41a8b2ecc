# k8slib.sh — what the scripts of test/k8s that install the chart on the
# real 1.36 cluster of ../shared/kubelet136 share; sourced, with D (the
# run's directory) set before.  Not part of make test.
#   k8s_prepare          the service address DNAT'd to the API server, the
#                        node labelled as a GPU node
#   k8s_clean            a previous run's release, workloads and state gone
#   gs_install MODE SET  helmlite install of charts/gshare (--set SET), the
#                        pod Ready and, with the device plugin, its units in
#                        the node's allocatable
#   follow_logs          (in the background) every gshare container's log
#                        into $D/logs until $D/stop-logs exists
#   newest, agent_pid    the newest gshare pod; its agent's host pid
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd); B=${B:-build}
HL=${HELMLITE:-/tmp/helmlite/helmlite}; REPO=ghcr.io/gshare/gshare
export KUBECONFIG=/tmp/k134/etc/admin.kubeconfig PATH=/tmp/k134/bin:/tmp/k134/ctrd17/usr/bin:$PATH
CTR="ctr -a /run/containerd-k134/containerd.sock -n k8s.io"
NS=kube-system; SEL=app.kubernetes.io/name=gshare
ts() { date +%T.%3N; }
ms() { date +%s%3N; }
say() { echo "$(ts) $*" | tee -a $D/run.log; }

k8s_prepare() {
  local ip; ip=$(cat /tmp/k134/etc/node-ip)
  # No kube-proxy on this cluster: the kubernetes service's address (what
  # the agent and the DRA plugin use in a cluster) is sent to the API
  # server as kube-proxy would.
  iptables -t nat -C PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination $ip:6443 2>/dev/null ||
    iptables -t nat -A PREROUTING -d 10.96.0.1/32 -p tcp --dport 443 -j DNAT --to-destination $ip:6443
  kubectl label node --all nvidia.com/gpu.present=true --overwrite >/dev/null
}

# helmlite has no uninstall: a previous run's release, workloads and state
# go before this one starts, so that each run starts on a fresh node.
k8s_clean() {
  kubectl delete pod --all --ignore-not-found --wait=true >/dev/null 2>&1
  kubectl delete resourceclaimtemplate --all --ignore-not-found >/dev/null 2>&1
  kubectl -n $NS delete ds,configmap,serviceaccount -l app.kubernetes.io/instance=gshare --ignore-not-found --wait=true >/dev/null 2>&1
  kubectl delete clusterrole,clusterrolebinding,deviceclass -l app.kubernetes.io/instance=gshare --ignore-not-found >/dev/null 2>&1
  kubectl -n $NS delete secret -l owner=helm,name=gshare --ignore-not-found >/dev/null 2>&1
  for _ in $(seq 100); do [[ -z $(kubectl -n $NS get pod -l $SEL -o name 2>/dev/null) ]] && break; sleep 0.3; done
  rm -rf /var/lib/gshare /run/gshare
}

gs_install() { # MODE SET
  say "helmlite install gshare ($1, ${INSTALL_CHART:-charts/gshare}, --set $2)"
  $HL install gshare ${INSTALL_CHART:-$ROOT/charts/gshare} $NS --set "$2" 2>&1 | tee -a $D/run.log
  kubectl -n $NS rollout status ds/gshare --timeout=180s | tee -a $D/run.log
  say "gshare pod Ready"
  if [[ $1 == deviceplugin ]]; then  # the plugin's units in the node's status (its next update)
    for _ in $(seq 120); do
      [[ $(kubectl get node -o jsonpath='{.items[0].status.allocatable.gshare\.io/gpumem}') =~ ^[1-9] ]] && break; sleep 0.5
    done
  fi
}

follow_logs() {
  declare -A seen
  local pod cs c name rc run k
  while [[ ! -e $D/stop-logs ]]; do
    while read -r pod cs; do
      for c in ${cs//,/ }; do   # name:restarts:running
        IFS=: read -r name rc run <<<"$c"
        [[ $run == true ]] || continue
        k=$pod.$name.$rc; [[ -n ${seen[$k]:-} ]] && continue; seen[$k]=1
        kubectl -n $NS logs -f --timestamps $pod -c $name > $D/logs/$k.log 2>&1 &
      done
    done < <(kubectl -n $NS get pod -l $SEL -o go-template='{{range .items}}{{.metadata.name}} {{range .status.containerStatuses}}{{.name}}:{{.restartCount}}:{{if .state.running}}true{{else}}false{{end}},{{end}}{{"\n"}}{{end}}' 2>/dev/null)
    sleep 1
  done
}

newest() { kubectl -n $NS get pod -l $SEL --sort-by=.metadata.creationTimestamp -o name | tail -1; }

agent_pid() { # the host pid of the newest pod's agent container's process
  local cid
  cid=$(kubectl -n $NS get $(newest) -o jsonpath='{.status.containerStatuses[?(@.name=="agent")].containerID}')
  cid=${cid#containerd://}; [[ -n $cid ]] || return 1
  $CTR task ls | awk -v c=$cid '$1==c && $3=="RUNNING" {print $2}'
}
