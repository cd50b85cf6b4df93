#!/usr/bin/python3
"""Self-test of push_mock.py: credentials from make_credentials.sh (openssl CLI), the mock started as a
subprocess, driven with Debian's curl --http2 and a small python-h2 client. Prints one line per check
and 'N passed, M failed'; exits non-zero when anything is wrong.

    /usr/bin/python3 Tests/PushMocks/selftest.py [--keep]     (--keep leaves the temp dir)
"""

import os
import sys

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
except ImportError as _missing:
    _debian = "/usr/bin/python3"
    if (os.path.exists(_debian) and not os.environ.get("PUSH_MOCK_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(_debian)):
        os.environ["PUSH_MOCK_REEXEC"] = "1"
        os.execv(_debian, [_debian] + sys.argv)
    sys.stderr.write("selftest: %s; apt-get install -y python3-h2 python3-cryptography curl openssl\n" % _missing)
    sys.exit(3)

import asyncio
import base64
import json
import re
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PASSED, FAILED = [], []


def check(name, cond, detail=""):
    if cond:
        PASSED.append(name)
        print("ok - %s" % name)
    else:
        FAILED.append(name)
        print("FAIL - %s%s" % (name, (": " + str(detail)) if detail != "" else ""))
    sys.stdout.flush()
    return cond


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def es256_jwt(key, kid, iss, iat, alg="ES256"):
    h = b64url(json.dumps({"alg": alg, "kid": kid}).encode())
    c = b64url(json.dumps({"iss": iss, "iat": iat}).encode())
    r, s = decode_dss_signature(key.sign(("%s.%s" % (h, c)).encode(), ec.ECDSA(hashes.SHA256())))
    return "%s.%s.%s" % (h, c, b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big")))


def rs256_jwt(key, claims, kid=None):
    header = {"alg": "RS256", "typ": "JWT"}
    if kid:
        header["kid"] = kid
    h = b64url(json.dumps(header).encode())
    c = b64url(json.dumps(claims).encode())
    sig = key.sign(("%s.%s" % (h, c)).encode(), padding.PKCS1v15(), hashes.SHA256())
    return "%s.%s.%s" % (h, c, b64url(sig))


class Env:
    pass


E = Env()


def curl(port, path, headers=(), body=None, method=None, http="--http2"):
    """Returns (http_version, status, headers dict, body text)."""
    hfile = os.path.join(E.dir, "curl.headers")
    bfile = os.path.join(E.dir, "curl.body")
    cmd = ["curl", http, "-sS", "--cacert", E.ca, "-D", hfile, "-o", bfile, "-w", "%{http_version}",
           "--max-time", "10", "https://localhost:%d%s" % (port, path),
           "--resolve", "localhost:%d:127.0.0.1" % port]
    for k, v in headers:
        cmd += ["-H", "%s: %s" % (k, v)]
    if body is not None:
        cmd += ["--data-binary", "@-"]
    if method:
        cmd += ["-X", method]
    p = subprocess.run(cmd, input=(body.encode() if isinstance(body, str) else body), capture_output=True)
    if p.returncode != 0:
        return None, None, {}, p.stderr.decode()
    hs = {}
    status = None
    with open(hfile) as f:
        for line in f:
            line = line.strip()
            if line.startswith("HTTP/"):
                status = int(line.split()[1])
            elif ":" in line:
                k, _, v = line.partition(":")
                hs[k.strip().lower()] = v.strip()
    with open(bfile) as f:
        text = f.read()
    return p.stdout.decode(), status, hs, text


def control(method, path, doc=None):
    data = json.dumps(doc).encode() if doc is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (E.ports["control"], path), data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def apns_headers(jwt=None, topic="eu.wristler.app", push_type="alert", priority="10", extra=()):
    h = []
    if jwt is not False:
        h.append(("authorization", "bearer " + (jwt or E.jwt)))
    if topic is not None:
        h.append(("apns-topic", topic))
    if push_type is not None:
        h.append(("apns-push-type", push_type))
    if priority is not None:
        h.append(("apns-priority", priority))
    return h + list(extra)


PAYLOAD = json.dumps({"aps": {"alert": {"title": "Hi", "body": "There"}, "badge": 1},
                      "type": "orders", "event": "order_paid"})


def apns(env, token, headers=None, body=PAYLOAD, method=None, path=None):
    port = E.ports["apnsProduction" if env == "prod" else "apnsDevelopment"]
    ver, status, hs, text = curl(port, path or "/3/device/" + token,
                                 apns_headers() if headers is None else headers, body, method)
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        doc = text
    return ver, status, hs, doc


def reason(r):
    return r[3].get("reason") if isinstance(r[3], dict) else r[3]


def tok(prefix, fill="0"):
    return (prefix + fill * 64)[:64]


# ---- a minimal HTTP/2 client ----------------------------------------------------------------

class _NoLimit:
    max_concurrent_streams = 2 ** 31 - 1

    def __init__(self, s):
        self._s = s

    def __getattr__(self, n):
        return getattr(self._s, n)


class GoawayTolerantClient(h2.connection.H2Connection):
    """h2 closes its state machine on GOAWAY and then rejects the answers to streams below last_stream_id,
    which a server may still send (RFC 9113 6.8): report the GOAWAY and keep reading."""

    def _receive_goaway_frame(self, frame):
        ev = h2.events.ConnectionTerminated()
        ev.error_code = frame.error_code
        ev.last_stream_id = frame.last_stream_id
        ev.additional_data = frame.additional_data or None
        return [], [ev]


class H2Client:
    async def connect(self, port):
        ctx = ssl.create_default_context(cafile=E.ca)
        ctx.set_alpn_protocols(["h2"])
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx,
                                                                 server_hostname="localhost")
        self.conn = GoawayTolerantClient(h2.config.H2Configuration(client_side=True,
                                                                          header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.writer.write(self.conn.data_to_send())
        self.streams = {}
        self.settings = []
        self.terminated = None
        self.eof = asyncio.get_running_loop().create_future()
        self.got_settings = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self.read_loop())
        await asyncio.wait_for(self.got_settings.wait(), 5)
        return self

    async def read_loop(self):
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    break
                for ev in self.conn.receive_data(data):
                    s = self.streams.get(getattr(ev, "stream_id", None))
                    if isinstance(ev, h2.events.RemoteSettingsChanged):
                        self.settings.append({k: v.new_value for k, v in ev.changed_settings.items()})
                        self.got_settings.set()
                    elif isinstance(ev, h2.events.ResponseReceived):
                        s["headers"] = dict(ev.headers)
                    elif isinstance(ev, h2.events.DataReceived):
                        s["body"] += ev.data
                        self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded):
                        s["done"].set_result("ended")
                    elif isinstance(ev, h2.events.StreamReset):
                        s["reset"] = ev.error_code
                        if not s["done"].done():
                            s["done"].set_result("reset")
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        self.terminated = ev
                        self.got_settings.set()
                out = self.conn.data_to_send()
                if out:
                    self.writer.write(out)
        except Exception as e:  # noqa: BLE001
            print("# h2 client read loop: %r" % e)
        finally:
            for s in self.streams.values():
                if not s["done"].done():
                    s["done"].set_result("eof")
            self.eof.set_result(True)

    def request(self, path, headers, body=b"", ignore_limit=False):
        sid = self.conn.get_next_available_stream_id()
        hs = [(":method", "POST"), (":scheme", "https"), (":authority", "localhost"), (":path", path)] + headers
        saved = self.conn.remote_settings
        if ignore_limit:
            self.conn.remote_settings = _NoLimit(saved)
        try:
            self.conn.send_headers(sid, hs, end_stream=not body)
        finally:
            self.conn.remote_settings = saved
        if body:
            self.conn.send_data(sid, body, end_stream=True)
        self.writer.write(self.conn.data_to_send())
        self.streams[sid] = {"headers": None, "body": b"", "reset": None,
                             "done": asyncio.get_running_loop().create_future()}
        return sid

    async def wait(self, sid, timeout=5):
        await asyncio.wait_for(asyncio.shield(self.streams[sid]["done"]), timeout)
        return self.streams[sid]

    def close(self):
        self.writer.close()


# ---- the checks ----------------------------------------------------------------------------

def test_apns():
    ver, status, hs, doc = apns("prod", tok("ab"))
    check("APNs valid request answers 200 over HTTP/2", ver == "2" and status == 200, (ver, status, doc))
    check("APNs 200 carries a new apns-id (UUID) and an empty body",
          UUID_RE.match(hs.get("apns-id", "")) is not None and doc is None, (hs, doc))
    given = "123e4567-e89b-12d3-a456-4266554400a0"
    r = apns("prod", tok("ab"), apns_headers(extra=[("apns-id", given)]))
    check("APNs echoes the apns-id it was given", r[1] == 200 and r[2].get("apns-id") == given, r[2])
    r = apns("dev", tok("ab"))
    check("APNs development answers 200 with apns-unique-id", r[1] == 200 and "apns-unique-id" in r[2], r[2])
    check("APNs production has no apns-unique-id", "apns-unique-id" not in hs, hs)

    # Markers.
    r = apns("prod", tok("dead"))
    check("dead… → 410 Unregistered with a millisecond timestamp",
          r[1] == 410 and reason(r) == "Unregistered" and isinstance(r[3].get("timestamp"), int)
          and r[3]["timestamp"] > 1e12, r)
    for env in ("prod", "dev"):
        r = apns(env, tok("bad0"))
        check("bad0… → 400 BadDeviceToken on %s" % env, r[1] == 400 and reason(r) == "BadDeviceToken", r)
    r1, r2 = apns("prod", tok("5a0d")), apns("dev", tok("5a0d"))
    check("5a0d… (sandbox) → 400 BadDeviceToken on production, 200 on development",
          r1[1] == 400 and reason(r1) == "BadDeviceToken" and r2[1] == 200, (r1, r2))
    r1, r2 = apns("prod", tok("900d")), apns("dev", tok("900d"))
    check("900d… (production) → 200 on production, 400 BadDeviceToken on development",
          r1[1] == 200 and r2[1] == 400 and reason(r2) == "BadDeviceToken", (r1, r2))
    r = apns("prod", tok("70c0"))
    check("70c0… → 400 DeviceTokenNotForTopic", r[1] == 400 and reason(r) == "DeviceTokenNotForTopic", r)
    t = tok("4290")
    rs = [apns("prod", t) for _ in range(3)]
    check("4290… → 429 TooManyRequests with Retry-After: 1 twice, then 200",
          [x[1] for x in rs] == [429, 429, 200] and reason(rs[0]) == "TooManyRequests"
          and rs[0][2].get("retry-after") == "1", [(x[1], x[2].get("retry-after")) for x in rs])
    t = tok("42903")
    rs = [apns("dev", t) for _ in range(4)]
    check("42903… → 429 three times (fifth hex digit is N), then 200", [x[1] for x in rs] == [429, 429, 429, 200],
          [x[1] for x in rs])
    rs = [apns("prod", tok("5000")) for _ in range(3)]
    check("5000… → 500 InternalServerError twice, then 200",
          [x[1] for x in rs] == [500, 500, 200] and reason(rs[0]) == "InternalServerError", [x[1] for x in rs])
    rs = [apns("prod", tok("50301")) for _ in range(2)]
    check("50301… → 503 ServiceUnavailable once, then 200",
          [x[1] for x in rs] == [503, 200] and reason(rs[0]) == "ServiceUnavailable", [x[1] for x in rs])

    # The provider token.
    r = apns("prod", tok("ab"), apns_headers(jwt=False))
    check("no authorization → 403 MissingProviderToken", r[1] == 403 and reason(r) == "MissingProviderToken", r)
    other = ec.generate_private_key(ec.SECP256R1())
    r = apns("prod", tok("ab"), apns_headers(jwt=es256_jwt(other, E.ids["apnsKeyId"], E.ids["apnsTeamId"],
                                                           int(time.time()))))
    check("JWT signed with another key → 403 InvalidProviderToken",
          r[1] == 403 and reason(r) == "InvalidProviderToken", r)
    r = apns("prod", tok("ab"), apns_headers(jwt=es256_jwt(E.apns_key, E.ids["apnsKeyId"], E.ids["apnsTeamId"],
                                                           int(time.time()) - 3700)))
    check("JWT with iat older than an hour → 403 ExpiredProviderToken",
          r[1] == 403 and reason(r) == "ExpiredProviderToken", r)
    r = apns("prod", tok("ab"), apns_headers(jwt=es256_jwt(E.apns_key, E.ids["apnsKeyId"], E.ids["apnsTeamId"],
                                                           int(time.time()) - 3000)))
    check("JWT 50 minutes old is still accepted", r[1] == 200, r)
    r = apns("prod", tok("ab"), apns_headers(jwt=es256_jwt(E.apns_key, E.ids["apnsKeyId"], E.ids["apnsTeamId"],
                                                           int(time.time()) + 600)))
    check("JWT with iat 10 minutes ahead → 403 InvalidProviderToken",
          r[1] == 403 and reason(r) == "InvalidProviderToken", r)
    r = apns("prod", tok("ab"), apns_headers(jwt=es256_jwt(E.apns_key, "OTHERKEY12", E.ids["apnsTeamId"],
                                                           int(time.time()))))
    check("JWT with another kid → 403 InvalidProviderToken", r[1] == 403 and reason(r) == "InvalidProviderToken", r)
    r = apns("prod", tok("ab"), apns_headers(jwt=es256_jwt(E.apns_key, E.ids["apnsKeyId"], "OTHERTEAM1",
                                                           int(time.time()))))
    check("JWT with another iss → 403 InvalidProviderToken", r[1] == 403 and reason(r) == "InvalidProviderToken", r)
    r = apns("prod", tok("ab"), apns_headers(jwt="not.a.jwt"))
    check("garbage bearer → 403 InvalidProviderToken", r[1] == 403 and reason(r) == "InvalidProviderToken", r)
    jwt1 = es256_jwt(E.apns_key, E.ids["apnsKeyId"], E.ids["apnsTeamId"], int(time.time()) - 5)
    r1 = apns("prod", tok("e403"), apns_headers(jwt=jwt1))
    r2 = apns("prod", tok("ab"), apns_headers(jwt=jwt1))
    jwt2 = es256_jwt(E.apns_key, E.ids["apnsKeyId"], E.ids["apnsTeamId"], int(time.time()))
    r3 = apns("prod", tok("e403"), apns_headers(jwt=jwt2))
    check("e403… → 403 ExpiredProviderToken; that JWT stays expired; a new JWT then gets 200",
          r1[1] == 403 and reason(r1) == "ExpiredProviderToken" and r2[1] == 403
          and reason(r2) == "ExpiredProviderToken" and r3[1] == 200, (r1[1], r2[1], r3[1]))

    # Headers, path, method and payload.
    cases = [
        ("missing apns-topic → 400 MissingTopic", apns_headers(topic=None), PAYLOAD, 400, "MissingTopic"),
        ("unknown apns-push-type → 400 InvalidPushType", apns_headers(push_type="shout"), PAYLOAD, 400,
         "InvalidPushType"),
        ("apns-priority 7 → 400 BadPriority", apns_headers(priority="7"), PAYLOAD, 400, "BadPriority"),
        ("apns-expiration not a number → 400 BadExpirationDate",
         apns_headers(extra=[("apns-expiration", "soon")]), PAYLOAD, 400, "BadExpirationDate"),
        ("apns-id not a UUID → 400 BadMessageId", apns_headers(extra=[("apns-id", "42")]), PAYLOAD, 400,
         "BadMessageId"),
        ("apns-collapse-id of 65 bytes → 400 BadCollapseId",
         apns_headers(extra=[("apns-collapse-id", "c" * 65)]), PAYLOAD, 400, "BadCollapseId"),
        ("apns-collapse-id of 64 bytes → 200", apns_headers(extra=[("apns-collapse-id", "c" * 64)]), PAYLOAD,
         200, None),
        ("empty payload → 400 PayloadEmpty", None, "", 400, "PayloadEmpty"),
        ("payload of 4097 bytes → 413 PayloadTooLarge", None,
         json.dumps({"aps": {"alert": "x" * (4097 - 22)}}), 413, "PayloadTooLarge"),
        ("payload of 4096 bytes → 200", None, json.dumps({"aps": {"alert": "x" * (4096 - 22)}}), 200, None),
        ("payload without an aps dictionary → 400 BadPayload", None, '{"type": "orders"}', 400, "BadPayload"),
        ("payload not JSON → 400 BadPayload", None, "hello", 400, "BadPayload"),
    ]
    for name, hdrs, body, status, why in cases:
        r = apns("prod", tok("ab"), hdrs, body)
        check(name, r[1] == status and (why is None or reason(r) == why), r)
    assert len(json.dumps({"aps": {"alert": "x" * (4096 - 22)}})) == 4096
    r = apns("prod", tok("ab"), body=None, method="GET")
    check("GET → 405 MethodNotAllowed", r[1] == 405 and reason(r) == "MethodNotAllowed", r)
    r = apns("prod", "", path="/3/devices/" + tok("ab"))
    check("another path → 404 BadPath", r[1] == 404 and reason(r) == "BadPath", r)
    r = apns("prod", "", path="/3/device/")
    check("no token in the path → 400 MissingDeviceToken", r[1] == 400 and reason(r) == "MissingDeviceToken", r)
    r = apns("prod", "xyz" * 10)
    check("token not 64 hex → 400 BadDeviceToken", r[1] == 400 and reason(r) == "BadDeviceToken", r)
    r = apns("prod", tok("ab"), apns_headers(extra=[("apns-topic", "again")]))
    check("a repeated apns-topic → 400 DuplicateHeaders", r[1] == 400 and reason(r) == "DuplicateHeaders", r)
    r = apns("prod", tok("ab"), apns_headers(push_type=None))
    check("missing apns-push-type is accepted (iOS) with a warning in /requests",
          r[1] == 200 and control("GET", "/requests")["requests"][-1]["warnings"], r)


def fcm_assertion(**over):
    t = int(time.time())
    claims = {"iss": E.ids["fcmClientEmail"], "scope": "https://www.googleapis.com/auth/firebase.messaging",
              "aud": E.ready["fcmTokenUri"], "iat": t, "exp": t + 3600}
    key = over.pop("key", E.fcm_key)
    claims.update(over)
    return rs256_jwt(key, claims, E.ids["fcmPrivateKeyId"])


def fcm_token_request(assertion, grant=None, http="--http2"):
    body = urllib.parse.urlencode({"grant_type": grant or "urn:ietf:params:oauth:grant-type:jwt-bearer",
                                   "assertion": assertion})
    ver, status, hs, text = curl(E.ports["fcm"], "/token",
                                 [("content-type", "application/x-www-form-urlencoded")], body, http=http)
    return ver, status, hs, json.loads(text) if text else None


def fcm_send(message, access=None, project=None, raw=None):
    hdrs = [("content-type", "application/json")]
    if access is not False:
        hdrs.append(("authorization", "Bearer " + (access or E.access)))
    body = raw if raw is not None else json.dumps({"message": message})
    ver, status, hs, text = curl(E.ports["fcm"], "/v1/projects/%s/messages:send" % (project or E.ids["fcmProject"]),
                                 hdrs, body)
    try:
        return ver, status, hs, json.loads(text) if text else None
    except ValueError:
        return ver, status, hs, text


def fcm_code(r):
    try:
        return [d.get("errorCode") for d in r[3]["error"].get("details", [])
                if d.get("@type", "").endswith("FcmError")][0]
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def msg(token, **over):
    m = {"token": token, "notification": {"title": "Betaald", "body": "Je bestelling is betaald"},
         "data": {"type": "orders", "event": "order_paid", "orderId": "42", "notificationId": "7"},
         "android": {"collapse_key": "order-42", "ttl": "86400s", "notification": {"tag": "order-42"}}}
    m.update(over)
    return m


def test_fcm():
    r = fcm_token_request(fcm_assertion())
    ok = check("FCM token endpoint answers an access token over HTTP/2",
               r[0] == "2" and r[1] == 200 and r[3].get("token_type") == "Bearer"
               and r[3].get("expires_in") == 3600 and r[3].get("access_token"), r)
    E.access = r[3]["access_token"] if ok else "none"
    r = fcm_token_request(fcm_assertion(), http="--http1.1")
    check("FCM token endpoint also answers over HTTP/1.1", r[0] == "1.1" and r[1] == 200, r)
    from cryptography.hazmat.primitives.asymmetric import rsa
    r = fcm_token_request(fcm_assertion(key=rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    check("assertion signed with another key → 400 invalid_grant",
          r[1] == 400 and r[3].get("error") == "invalid_grant", r)
    r = fcm_token_request(fcm_assertion(aud="https://oauth2.googleapis.com/token"))
    check("assertion for another audience → 400 invalid_grant", r[1] == 400 and r[3].get("error") == "invalid_grant", r)
    t = int(time.time())
    r = fcm_token_request(fcm_assertion(iat=t, exp=t + 7200))
    check("assertion living two hours → 400 invalid_grant", r[1] == 400 and r[3].get("error") == "invalid_grant", r)
    r = fcm_token_request(fcm_assertion(iss="someone@else.iam.gserviceaccount.com"))
    check("assertion from another account → 400 invalid_grant", r[1] == 400 and r[3].get("error") == "invalid_grant", r)
    r = fcm_token_request(fcm_assertion(), grant="client_credentials")
    check("another grant_type → 400 unsupported_grant_type",
          r[1] == 400 and r[3].get("error") == "unsupported_grant_type", r)

    r = fcm_send(msg("good-token-1"))
    check("FCM send answers 200 with projects/P/messages/ID over HTTP/2",
          r[0] == "2" and r[1] == 200
          and str(r[3].get("name", "")).startswith("projects/%s/messages/" % E.ids["fcmProject"]), r)
    r = fcm_send(msg("good-token-1"), access=False)
    check("FCM send without a token → 401 UNAUTHENTICATED",
          r[1] == 401 and r[3]["error"]["status"] == "UNAUTHENTICATED" and r[3]["error"]["code"] == 401, r)
    r = fcm_send(msg("good-token-1"), access="ya29.forged")
    check("FCM send with a token it did not issue → 401 UNAUTHENTICATED", r[1] == 401, r)
    r = fcm_send(msg("good-token-1"), project="another-project")
    check("FCM send to another project → 403 PERMISSION_DENIED",
          r[1] == 403 and r[3]["error"]["status"] == "PERMISSION_DENIED", r)
    r = fcm_send(msg("good-token-1", data={"orderId": 42}))
    check("FCM data value not a string → 400 INVALID_ARGUMENT naming message.data[0].value",
          r[1] == 400 and r[3]["error"]["status"] == "INVALID_ARGUMENT"
          and "message.data[0].value" in r[3]["error"]["message"], r)
    r = fcm_send(msg("good-token-1", data={"k": "v" * 4096}))
    check("FCM data over 4096 bytes → 400 INVALID_ARGUMENT", r[1] == 400, r)
    r = fcm_send(msg("good-token-1", android={"ttl": "1 day"}))
    check("FCM android.ttl not a Duration → 400 INVALID_ARGUMENT", r[1] == 400, r)
    r = fcm_send(msg("good-token-1", android={"collapse_key": "a", "notification": {"tag": "a"}, "colour": 1}))
    check("FCM unknown field → 400 INVALID_ARGUMENT", r[1] == 400, r)
    r = fcm_send(None, raw="{not json")
    check("FCM body not JSON → 400 INVALID_ARGUMENT", r[1] == 400, r)
    cases = [("dead-1", 404, "NOT_FOUND", "UNREGISTERED"), ("mismatch-1", 403, "PERMISSION_DENIED", "SENDER_ID_MISMATCH"),
             ("invalid-1", 400, "INVALID_ARGUMENT", "INVALID_ARGUMENT")]
    for token, status, gstatus, code in cases:
        r = fcm_send(msg(token))
        check("FCM %s… → %d %s / %s" % (token[:-1], status, gstatus, code),
              r[1] == status and r[3]["error"]["status"] == gstatus and fcm_code(r) == code, r)
    r = fcm_send(msg("dead-1"))
    check("FCM UNREGISTERED body is Google's shape",
          r[3] == {"error": {"code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND",
                             "details": [{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError",
                                          "errorCode": "UNREGISTERED"}]}}, r[3])
    rs = [fcm_send(msg("busy-a")) for _ in range(3)]
    check("FCM busy-… → 429 QUOTA_EXCEEDED with Retry-After twice, then 200",
          [x[1] for x in rs] == [429, 429, 200] and fcm_code(rs[0]) == "QUOTA_EXCEEDED"
          and rs[0][2].get("retry-after") == "1", [(x[1], x[2].get("retry-after")) for x in rs])
    rs = [fcm_send(msg("down-1-a")) for _ in range(2)]
    check("FCM down-1-… → 503 UNAVAILABLE once, then 200",
          [x[1] for x in rs] == [503, 200] and fcm_code(rs[0]) == "UNAVAILABLE", [x[1] for x in rs])
    rs = [fcm_send(msg("oops-a")) for _ in range(3)]
    check("FCM oops-… → 500 INTERNAL twice, then 200",
          [x[1] for x in rs] == [500, 500, 200] and fcm_code(rs[0]) == "INTERNAL", [x[1] for x in rs])
    control("POST", "/fcm/revoke")
    r = fcm_send(msg("good-token-1"))
    check("after /fcm/revoke the old access token → 401", r[1] == 401, r)
    r = fcm_token_request(fcm_assertion())
    E.access = r[3].get("access_token", "none")
    r = fcm_send(msg("good-token-1"))
    check("a fresh access token works again", r[1] == 200, r)


def test_control():
    rows = control("GET", "/requests")["requests"]
    check("/requests lists every request in order",
          len(rows) > 50 and [x["seq"] for x in rows] == list(range(1, len(rows) + 1)), len(rows))
    first = rows[0]
    check("/requests rows carry listener, path, headers, body and the answer",
          first["listener"] == "apnsProduction" and first["path"].startswith("/3/device/")
          and first["headers"].get("apns-topic") == "eu.wristler.app" and first["body"]["aps"]["badge"] == 1
          and first["response"]["status"] == 200 and first["sent"] is True, first)
    fcm_rows = control("GET", "/requests?listener=fcm")["requests"]
    sends = [x for x in fcm_rows if x["path"].endswith(":send") and x["response"]["status"] == 200]
    check("/requests?listener=fcm filters, and FCM rows carry the parsed message",
          all(x["listener"] == "fcm" for x in fcm_rows) and sends
          and sends[0]["body"]["message"]["android"]["notification"]["tag"] == "order-42", len(fcm_rows))
    st = control("GET", "/stats")
    check("/stats counts per listener and status",
          st["listeners"]["apnsProduction"]["status"].get("410") == 1
          and st["listeners"]["fcm"]["reasons"].get("UNREGISTERED") == 2, st["listeners"]["apnsProduction"])
    control("POST", "/reset")
    check("/reset forgets requests", control("GET", "/requests")["count"] == 0)
    rs = [apns("prod", tok("4290")) for _ in range(2)]
    check("/reset forgets per-token state (4290… starts over)", [x[1] for x in rs] == [429, 429],
          [x[1] for x in rs])
    control("POST", "/delay", {"ms": 300})
    t0 = time.time()
    r = apns("prod", tok("ab"))
    took = time.time() - t0
    control("POST", "/delay", {"ms": 0})
    check("/delay holds every answer", r[1] == 200 and took >= 0.3, took)


async def test_h2():
    port = E.ports["apnsProduction"]
    hdrs = apns_headers()
    body = PAYLOAD.encode()
    c = await H2Client().connect(port)
    check("initial SETTINGS advertise --max-concurrent-streams",
          c.settings and c.settings[0].get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == 1000, c.settings)
    # Multiplexing: 20 concurrent streams held by a delay.
    control("POST", "/delay", {"ms": 200})
    control("POST", "/reset")
    sids = [c.request("/3/device/" + tok("ab"), hdrs, body) for _ in range(20)]
    res = [await c.wait(s) for s in sids]
    st = control("GET", "/stats")["listeners"]["apnsProduction"]
    check("20 concurrent streams on one connection all answer 200",
          all(r["headers"][":status"] == "200" for r in res) and st["maxConcurrentStreamsSeen"] == 20,
          (st["maxConcurrentStreamsSeen"], [r["headers"] for r in res][:1]))
    # The limit drops to 1 on an open connection.
    control("POST", "/streams", {"max": 1})
    await asyncio.sleep(0.2)
    check("/streams sends SETTINGS_MAX_CONCURRENT_STREAMS=1 on an open connection",
          c.settings[-1].get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == 1, c.settings)
    a = c.request("/3/device/" + tok("ab"), hdrs, body)
    b = c.request("/3/device/" + tok("ab"), hdrs, body, ignore_limit=True)
    ra, rb = await c.wait(a), await c.wait(b)
    check("a second stream past the limit is refused with RST_STREAM(REFUSED_STREAM), the first answers 200",
          ra["headers"] and ra["headers"][":status"] == "200" and rb["reset"] == 7, (ra, rb))
    st = control("GET", "/stats")["listeners"]["apnsProduction"]
    check("/stats counts the refused stream", st["refusedStreams"] == 1, st)
    c2 = await H2Client().connect(port)
    check("a new connection gets SETTINGS_MAX_CONCURRENT_STREAMS=1",
          c2.settings[0].get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == 1, c2.settings)
    x = c2.request("/3/device/" + tok("ab"), hdrs, body)
    rx = await c2.wait(x)
    y = c2.request("/3/device/" + tok("ab"), hdrs, body)
    ry = await c2.wait(y)
    check("one stream at a time still works under the limit",
          rx["headers"][":status"] == "200" and ry["headers"][":status"] == "200", (rx, ry))
    control("POST", "/streams", {"max": 100})
    await asyncio.sleep(0.1)
    c.close()
    c2.close()

    # GOAWAY with streams in flight.
    control("POST", "/delay", {"ms": 400})
    g = await H2Client().connect(port)
    s1 = g.request("/3/device/" + tok("ab"), hdrs, body)
    s2 = g.request("/3/device/" + tok("ab"), hdrs, body)
    await asyncio.sleep(0.15)
    n = control("POST", "/goaway")["connections"]
    r1, r2 = await g.wait(s1), await g.wait(s2)
    try:
        await asyncio.wait_for(asyncio.shield(g.eof), 3)
        closed = True
    except asyncio.TimeoutError:
        closed = False
    term = g.terminated
    check("/goaway sends GOAWAY(NO_ERROR, last stream id) on open connections",
          n >= 1 and term is not None and term.error_code == 0 and term.last_stream_id == s2, (n, term))
    check("APNs GOAWAY carries {\"reason\": \"Shutdown\"}",
          term is not None and term.additional_data == b'{"reason":"Shutdown"}', term and term.additional_data)
    check("streams in flight at GOAWAY still get their 200",
          r1["headers"] and r1["headers"][":status"] == "200" and r2["headers"]
          and r2["headers"][":status"] == "200", (r1, r2))
    check("the connection is closed after its streams end", closed)
    control("POST", "/delay", {"ms": 0})
    g2 = await H2Client().connect(port)
    s = g2.request("/3/device/" + tok("ab"), hdrs, body)
    r = await g2.wait(s)
    check("a new connection after GOAWAY works", r["headers"] and r["headers"][":status"] == "200", r)
    g2.close()
    st = control("GET", "/stats")["listeners"]["apnsProduction"]
    check("/stats counts the GOAWAY", st["goaways"] >= 1, st)


def test_h2load():
    h2load = shutil.which("h2load")
    if not h2load:
        print("# h2load not installed (nghttp2-client); skipping the h2load check")
        return
    control("POST", "/reset")
    bodyfile = os.path.join(E.dir, "payload.json")
    with open(bodyfile, "w") as f:
        f.write(PAYLOAD)
    hs = []
    for k, v in apns_headers():
        hs += ["-H", "%s: %s" % (k, v)]
    p = subprocess.run([h2load, "-n", "2000", "-c", "2", "-m", "50", "-d", bodyfile] + hs +
                       ["https://127.0.0.1:%d/3/device/%s" % (E.ports["apnsProduction"], tok("ab"))],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"finished in ([0-9.]+)(m?s), ([0-9.]+) req/s", p.stdout)
    ok2xx = re.search(r"status codes: (\d+) 2xx", p.stdout)
    check("h2load: 2000 requests on 2 connections × 50 streams all answer 2xx",
          ok2xx is not None and ok2xx.group(1) == "2000", p.stdout[-600:])
    if m:
        print("# mock throughput under h2load: %s req/s" % m.group(3))


def test_shutdown():
    # stdin closed → exit
    rc = None
    E.proc.stdin.close()
    try:
        rc = E.proc.wait(5)
    except subprocess.TimeoutExpired:
        E.proc.kill()
    check("closing stdin ends the mock", rc is not None, rc)
    # SIGTERM → exit (stdin is /dev/null here, which is not watched)
    p, ready = start_mock(stdin=subprocess.DEVNULL, ready_name="ready2.json")
    time.sleep(0.6)
    alive = p.poll() is None
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(5)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = None
    check("stdin at /dev/null is not taken for a closed pipe; SIGTERM ends the mock", alive and rc is not None,
          (alive, rc))


def start_mock(stdin, ready_name="ready.json"):
    ready = os.path.join(E.dir, ready_name)
    d = E.dir
    cmd = [sys.executable, os.path.join(HERE, "push_mock.py"),
           "--cert", os.path.join(d, "server.pem"), "--key", os.path.join(d, "server-key.pem"),
           "--apns-key-pem", os.path.join(d, "apns-key-public.pem"), "--apns-key-id", E.ids["apnsKeyId"],
           "--apns-team-id", E.ids["apnsTeamId"], "--fcm-project", E.ids["fcmProject"],
           "--fcm-client-email", E.ids["fcmClientEmail"],
           "--fcm-public-key-pem", os.path.join(d, "fcm-key-public.pem"), "--ready-file", ready]
    p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "mock-%s.err" % ready_name), "w"))
    deadline = time.time() + 10
    while not os.path.exists(ready):
        if time.time() > deadline or p.poll() is not None:
            sys.stderr.write(open(os.path.join(d, "mock-%s.err" % ready_name)).read())
            raise SystemExit("selftest: the mock did not get ready")
        time.sleep(0.05)
    with open(ready) as f:
        return p, json.load(f)


def main():
    keep = "--keep" in sys.argv
    E.dir = tempfile.mkdtemp(prefix="push-mock-selftest-")
    try:
        subprocess.run(["bash", os.path.join(HERE, "make_credentials.sh"), E.dir], check=True)
        E.ca = os.path.join(E.dir, "ca.pem")
        with open(os.path.join(E.dir, "ids.json")) as f:
            E.ids = json.load(f)
        with open(os.path.join(E.dir, "apns-key.p8"), "rb") as f:
            E.apns_key = serialization.load_pem_private_key(f.read(), None)
        with open(os.path.join(E.dir, "fcm-service-account.json")) as f:
            sa = json.load(f)
        E.fcm_key = serialization.load_pem_private_key(sa["private_key"].encode(), None)
        check("make_credentials.sh writes a service account in Google's shape",
              sa["type"] == "service_account" and sa["client_email"] == E.ids["fcmClientEmail"]
              and "token_uri" in sa and sa["private_key"].startswith("-----BEGIN PRIVATE KEY-----"), sa.keys())
        E.proc, E.ready = start_mock(subprocess.PIPE)
        E.ports = E.ready
        check("ready file names four ports",
              all(isinstance(E.ready.get(k), int) for k in ("apnsProduction", "apnsDevelopment", "fcm", "control")),
              E.ready)
        E.jwt = es256_jwt(E.apns_key, E.ids["apnsKeyId"], E.ids["apnsTeamId"], int(time.time()))
        test_apns()
        test_fcm()
        test_control()
        asyncio.run(test_h2())
        test_h2load()
        test_shutdown()
    finally:
        if getattr(E, "proc", None) and E.proc.poll() is None:
            E.proc.kill()
        if keep:
            print("# kept %s" % E.dir)
        else:
            shutil.rmtree(E.dir, ignore_errors=True)
    print("%d passed, %d failed" % (len(PASSED), len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
