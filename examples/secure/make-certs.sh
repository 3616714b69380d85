#!/usr/bin/env bash
# Make a throwaway certificate authority and the certificates of the secure example, with
# openssl, as PEM files in DIR (made if missing):
#   DIR/ca.pem                       the CA's certificate: every node's and client's trust store
#   DIR/ca-key.pem                   the CA's key (only to issue more; keep it away from nodes)
#   DIR/node-N/keystore.pem          node N's key then its certificate chain: the file
#                                    ssl.keystore.location names with ssl.keystore.type=PEM
#   DIR/node-N/cert.pem, key.pem     the same chain and key as separate files
#   DIR/client/keystore.pem, ...     a client certificate (CN=client), for mutual TLS
# Node certificates name localhost and 127.0.0.1 (the hosts the example listens on), so the
# clients' host name check (ssl.endpoint.identification.algorithm=https) passes. Keys are
# EC P-256, unencrypted; certificates last DAYS days (default 30). Nothing here is fit for
# production: a real CA keeps its key offline and issues per host.
#
# usage: examples/secure/make-certs.sh DIR [NODES] [DAYS]     (NODES default 3)
# An existing DIR/ca.pem and node files are kept (so a restart keeps its certificates);
# delete DIR to make new ones.
set -euo pipefail
usage="usage: examples/secure/make-certs.sh DIR [NODES] [DAYS]"
dir=${1:-}
nodes=${2:-3}
days=${3:-30}
if [ -z "$dir" ] || [ "$#" -gt 3 ] || ! [[ "$nodes" =~ ^[1-9][0-9]?$ ]] \
        || ! [[ "$days" =~ ^[1-9][0-9]{0,3}$ ]]; then
    echo "$usage" >&2
    echo "  NODES is 1 to 99, DAYS 1 to 9999" >&2
    exit 2
fi
if ! command -v openssl > /dev/null; then
    echo "make-certs.sh: openssl is not installed (on Debian/Ubuntu: apt-get install openssl)" >&2
    exit 1
fi
mkdir -p "$dir"
umask 077  # keys readable by their owner only

if [ ! -s "$dir/ca.pem" ] || [ ! -s "$dir/ca-key.pem" ]; then
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$dir/ca-key.pem"
    openssl req -x509 -new -key "$dir/ca-key.pem" -sha256 -days "$days" \
        -subj "/C=US/O=pykraft example/CN=pykraft example CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$dir/ca.pem"
    echo "made the CA: $dir/ca.pem"
fi

# issue NAME EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES]
issue() {
    local name=$1 usage=$2 names=${3:-} out="$dir/$1"
    [ -s "$out/keystore.pem" ] && return 0
    mkdir -p "$out"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$out/key.pem"
    openssl req -new -key "$out/key.pem" -subj "/C=US/O=pykraft example/CN=$name" \
        -out "$out/request.csr"
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        [ -n "$names" ] && echo "subjectAltName=$names"
    } > "$out/extensions.cnf"
    openssl x509 -req -in "$out/request.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
        -CAcreateserial -days "$days" -sha256 -extfile "$out/extensions.cnf" \
        -out "$out/leaf.pem" 2> /dev/null
    cat "$out/leaf.pem" "$dir/ca.pem" > "$out/cert.pem"
    cat "$out/key.pem" "$out/cert.pem" > "$out/keystore.pem"
    rm -f "$out/request.csr" "$out/extensions.cnf" "$out/leaf.pem"
    echo "made $name: $out/keystore.pem"
}

for n in $(seq "$nodes"); do
    # a node is a TLS server (its listeners) and a client (to the other nodes)
    issue "node-$n" serverAuth,clientAuth "DNS:localhost,IP:127.0.0.1"
done
issue client clientAuth
chmod 644 "$dir/ca.pem"
