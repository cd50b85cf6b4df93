#!/bin/bash
# Writes a test CA and a server certificate for the SMTP mock into DIR (created if missing):
#   ca.pem                        a self-signed CA (the transport's caFile)
#   server.pem, server-key.pem    a certificate for 127.0.0.1 and localhost, signed by the CA
# Needs only the openssl CLI.
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
dir=$1
mkdir -p "$dir"
cd "$dir"
q() { openssl "$@" 2>/dev/null; }
q req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca-key.pem -out ca.pem \
  -days 3650 -subj "/CN=Wristler SMTP mock CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
q req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server-key.pem -out server.csr -subj "/CN=localhost"
cat > server.ext <<EXT
subjectAltName=IP:127.0.0.1,DNS:localhost
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
EXT
q x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 3650 -extfile server.ext
rm -f server.csr server.ext ca.srl ca-key.pem
chmod 600 server-key.pem
