#!/bin/bash
# Writes test credentials for the push mocks into DIR (created if missing):
#   ca.pem, ca-key.pem            a self-signed CA
#   server.pem, server-key.pem    a server certificate for 127.0.0.1 and localhost, signed by the CA
#   apns-key.p8                   APNs provider key as Apple issues it: PKCS#8 PEM, EC P-256
#   apns-key-public.pem           its public key (push_mock.py --apns-key-pem)
#   fcm-service-account.json      a service account in Google's shape; token_uri is "" until the test
#                                 knows the mock's port (the ready file's fcmTokenUri)
#   fcm-key.pem, fcm-key-public.pem  the service account's RSA key (PKCS#8) and public key
#   ids.json                      {"apnsKeyId", "apnsTeamId", "fcmProject", "fcmClientEmail", "fcmPrivateKeyId"}
# Overridable: APNS_KEY_ID (10 chars), APNS_TEAM_ID (10 chars), FCM_PROJECT.
# Needs only the openssl CLI.
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 DIR" >&2; exit 2; fi
dir=$1
mkdir -p "$dir"
cd "$dir"
key_id=${APNS_KEY_ID:-MOCKKEY123}
team_id=${APNS_TEAM_ID:-MOCKTEAM12}
project=${FCM_PROJECT:-wristler-mock}
email="push-mock@${project}.iam.gserviceaccount.com"
q() { openssl "$@" 2>/dev/null; }

q req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca-key.pem -out ca.pem \
  -days 3650 -subj "/CN=Wristler push mock CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
q req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server-key.pem -out server.csr \
  -subj "/CN=localhost"
cat > server.ext <<EXT
subjectAltName=IP:127.0.0.1,DNS:localhost
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
EXT
q x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out server.pem -days 3650 \
  -extfile server.ext
rm -f server.csr server.ext ca.srl

q genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out apns-key.p8
q pkey -in apns-key.p8 -pubout -out apns-key-public.pem

q genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out fcm-key.pem
q pkey -in fcm-key.pem -pubout -out fcm-key-public.pem
key_pem=$(awk '{printf "%s\\n", $0}' fcm-key.pem)
private_key_id=$(openssl rand -hex 20)
client_id=$(printf '1%020d' "$(( $(od -An -N4 -tu4 /dev/urandom) ))")
cat > fcm-service-account.json <<JSON
{
  "type": "service_account",
  "project_id": "$project",
  "private_key_id": "$private_key_id",
  "private_key": "$key_pem",
  "client_email": "$email",
  "client_id": "$client_id",
  "auth_uri": "https://accounts.google.com/o/oauth2/auth",
  "token_uri": "",
  "auth_provider_x509_cert_url": "https://www.googleapis.com/oauth2/v1/certs",
  "client_x509_cert_url": "https://www.googleapis.com/robot/v1/metadata/x509/push-mock%40${project}.iam.gserviceaccount.com",
  "universe_domain": "googleapis.com"
}
JSON
cat > ids.json <<JSON
{"apnsKeyId": "$key_id", "apnsTeamId": "$team_id", "fcmProject": "$project", "fcmClientEmail": "$email", "fcmPrivateKeyId": "$private_key_id"}
JSON
chmod 600 ca-key.pem server-key.pem apns-key.p8 fcm-key.pem fcm-service-account.json
