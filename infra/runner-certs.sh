#!/usr/bin/env bash
# Makes a certificate authority for one cluster and a certificate per node,
# for RUNNER_TLS_CA_FILE, RUNNER_TLS_CERT_FILE and RUNNER_TLS_KEY_FILE.
#
#   infra/runner-certs.sh <directory> [node-name ...]     (default: node1 node2 node3)
#
# Writes ca.crt (give it to every node), ca.key (keep it offline: it makes
# new nodes) and <node>.crt / <node>.key. A node is trusted because this CA
# signed its certificate, so use a CA made for the cluster alone, never a
# public or company-wide one. Certificates last DAYS days (default 825).
set -euo pipefail
dir=${1:?usage: infra/runner-certs.sh <directory> [node-name ...]}
shift
nodes=("$@")
[ ${#nodes[@]} -eq 0 ] && nodes=(node1 node2 node3)
days=${DAYS:-825}
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
    -subj "/CN=agent-host runner CA" -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
fi
for node in "${nodes[@]}"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$node" \
    -keyout "$dir/$node.key" -out "$dir/$node.csr" 2>/dev/null
  printf 'extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:%s\n' "$node" > "$dir/$node.ext"
  openssl x509 -req -in "$dir/$node.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$days" -extfile "$dir/$node.ext" -out "$dir/$node.crt" 2>/dev/null
  rm -f "$dir/$node.csr" "$dir/$node.ext"
done
chmod 644 "$dir/ca.crt" "$dir"/*.crt
echo "wrote $dir/ca.crt and a certificate per node: ${nodes[*]}"
