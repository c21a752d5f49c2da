#!/bin/sh
# Makes a private CA and a certificate for the compose example's TLS Redis
# (names `redis`, `modelshim-redis`, `localhost`, 127.0.0.1) in ./redis-tls/.
# Needs the openssl CLI. The CA key stays here: keep it out of images and git.
#   sh deploy/compose/redis-certs.sh [out-dir]
set -eu
out="${1:-$(dirname "$0")/redis-tls}"
mkdir -p "$out"
cd "$out"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
# shellcheck disable=SC2086
openssl req -x509 $ec -keyout ca.key -out ca.crt -days 825 -subj "/CN=modelshim redis CA" 2>/dev/null
# shellcheck disable=SC2086
openssl req $ec -keyout tls.key -out tls.csr -subj "/CN=redis" 2>/dev/null
printf 'subjectAltName=DNS:redis,DNS:modelshim-redis,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 825 -extfile tls.ext 2>/dev/null
rm -f tls.csr tls.ext ca.srl
# The redis image runs as uid 999; the key must be readable by it.
chmod 644 ca.crt tls.crt tls.key
echo "wrote $out/ca.crt, tls.crt, tls.key"
