#!/usr/bin/env bash
# kubelet-service.sh plays kubelet.service with kubeadm's 10-kubeadm.conf drop-in on a
# real-node lane node, which has no systemd: it runs /usr/bin/kubelet with the flags
# kubeadm writes, restarts it 2 s after it exits (Restart=always, RestartSec), and
# serves the requests of the systemctl stand-in through files in /run/realnode-kubelet,
# so that a caller in another PID namespace (the agent's pod) can restart it, as
# systemctl does over D-Bus. The binary is re-read at every start: swapping
# /usr/bin/kubelet and restarting takes effect, as on a real node.
set -uo pipefail

d=/run/realnode-kubelet
mkdir -p "$d"
# The service manager's PID namespace: the systemctl stand-in refuses callers from
# another, as systemd's D-Bus does.
echo $$ >"$d/manager.pid"
log=${REALNODE_LOG:-/var/log/kubelet.log}
gen=0 kpid="" last_exit=0

start_kubelet() {
	local KUBELET_KUBEADM_ARGS="" KUBELET_EXTRA_ARGS=""
	# shellcheck disable=SC1091
	[[ -f /var/lib/kubelet/kubeadm-flags.env ]] && source /var/lib/kubelet/kubeadm-flags.env
	# shellcheck disable=SC1091
	[[ -f /etc/default/kubelet ]] && source /etc/default/kubelet
	# shellcheck disable=SC2086
	/usr/bin/kubelet --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
		--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml \
		$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS >>"$log" 2>&1 </dev/null &
	kpid=$!
	gen=$((gen + 1))
	echo "$kpid" >"$d/pid"
	echo "$gen" >"$d/generation.tmp" && mv "$d/generation.tmp" "$d/generation"
	touch "$d/active"
}

stop_kubelet() {
	[[ -n $kpid ]] || return 0
	kill -TERM "$kpid" 2>/dev/null
	local i
	for i in $(seq 50); do kill -0 "$kpid" 2>/dev/null || break; sleep 0.2; done
	kill -KILL "$kpid" 2>/dev/null
	wait "$kpid" 2>/dev/null
	kpid=""
	rm -f "$d/active" "$d/pid"
}

trap 'stop_kubelet; exit 0' TERM INT
while true; do
	if [[ -f $d/stop-request ]]; then
		rm -f "$d/stop-request"; touch "$d/stopped"; stop_kubelet
	fi
	if [[ -f $d/start-request ]]; then
		rm -f "$d/start-request" "$d/stopped"
	fi
	if [[ -f $d/restart-request ]]; then
		rm -f "$d/restart-request" "$d/stopped"; stop_kubelet; start_kubelet
	fi
	if [[ -n $kpid ]] && ! kill -0 "$kpid" 2>/dev/null; then
		wait "$kpid" 2>/dev/null
		kpid="" last_exit=$SECONDS
		rm -f "$d/active" "$d/pid"
	fi
	if [[ -z $kpid && ! -f $d/stopped ]] && ((SECONDS - last_exit >= 2)); then
		start_kubelet
	fi
	sleep 0.2
done
