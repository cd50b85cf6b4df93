#!/usr/bin/python3
"""Local TLS HTTP/2 servers that answer like APNs and FCM HTTP v1, for the fan-out tests.

One process, four listeners on 127.0.0.1 (ports chosen by the OS):
  apnsProduction, apnsDevelopment  TLS, ALPN h2 only: POST /3/device/{token}
  fcm                              TLS, ALPN h2 (and http/1.1): POST /token, POST /v1/projects/{p}/messages:send
  control                          plain HTTP/1.1 JSON: /requests /reset /goaway /streams /delay /stats ...

See README.md beside this file for the CLI, the device-token markers and the control API.
Needs Debian's python3-h2 and python3-cryptography (run with /usr/bin/python3; another python3
first on PATH, such as pyenv's, is replaced by /usr/bin/python3 through exec, same pid).
"""

import os
import sys

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
    import h2.settings
    from h2.errors import ErrorCodes
    from hyperframe.frame import GoAwayFrame
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
except ImportError as _missing:
    _debian = "/usr/bin/python3"
    if (os.path.exists(_debian) and not os.environ.get("PUSH_MOCK_REEXEC")
            and os.path.realpath(sys.executable) != os.path.realpath(_debian)):
        os.environ["PUSH_MOCK_REEXEC"] = "1"
        os.execv(_debian, [_debian] + sys.argv)
    sys.stderr.write("push_mock: %s; install Debian's python3-h2 and python3-cryptography "
                     "(apt-get install -y python3-h2 python3-cryptography)\n" % _missing)
    sys.exit(3)

import argparse
import asyncio
import base64
import json
import re
import signal
import ssl
import stat
import time
import urllib.parse
import uuid

def _cache_huffman():
    """Clients send the provider token and device token as never-indexed literals, so hpack's pure-Python
    Huffman decoder runs on the same ~200 bytes for every request; remember the last few thousand."""
    import hpack.hpack
    decode = hpack.hpack.decode_huffman
    cache = {}

    def cached(data):
        data = bytes(data)
        out = cache.get(data)
        if out is None:
            if len(cache) > 4096:
                cache.clear()
            out = cache[data] = decode(data)
        return out
    hpack.hpack.decode_huffman = cached


_cache_huffman()

LISTENERS = ("apnsProduction", "apnsDevelopment", "fcm", "control")

HEX_TOKEN = re.compile(r"^[0-9a-fA-F]{64}$")
UUID_RE = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
APNS_PATH = re.compile(r"^/3/device/([^/?#]*)$")
FCM_SEND_PATH = re.compile(r"^/v1/projects/([^/]+)/messages:send$")
PUSH_TYPES = {"alert", "background", "location", "voip", "complication", "fileprovider", "mdm",
              "liveactivity", "pushtotalk", "widgets", "controls"}
FCM_SCOPES = {"https://www.googleapis.com/auth/firebase.messaging",
              "https://www.googleapis.com/auth/cloud-platform"}
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
MAX_BODY = 1 << 20

# Device-token markers (APNs: hex prefix of the 64-hex token, case-insensitive).
APNS_MARKERS = {
    "dead": "unregistered",      # 410 Unregistered (+ timestamp)
    "bad0": "bad",               # 400 BadDeviceToken on both hosts
    "5a0d": "sandbox",           # 400 BadDeviceToken on production, 200 on development
    "900d": "production",        # 400 BadDeviceToken on development, 200 on production
    "70c0": "nottopic",          # 400 DeviceTokenNotForTopic
    "4290": "toomany",           # 429 TooManyRequests + Retry-After, N times, then 200
    "5000": "internal",          # 500 InternalServerError, N times, then 200
    "5030": "unavailable",       # 503 ServiceUnavailable, N times, then 200
    "e403": "expired",           # 403 ExpiredProviderToken once; the JWT presented is then stale
}
# FCM: prefix of the registration token.
FCM_MARKERS = (
    ("dead-", "UNREGISTERED"),
    ("mismatch-", "SENDER_ID_MISMATCH"),
    ("invalid-", "INVALID_ARGUMENT"),
    ("busy-", "QUOTA_EXCEEDED"),
    ("down-", "UNAVAILABLE"),
    ("oops-", "INTERNAL"),
)
FCM_RETRYABLE = {"QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL"}


def now():
    return time.time()


def b64url_decode(s):
    if isinstance(s, str):
        s = s.encode("ascii")
    return base64.urlsafe_b64decode(s + b"=" * (-len(s) % 4))


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


class JWTError(Exception):
    pass


def parse_jwt(token):
    """Split and decode a compact JWS; returns (header, claims, signing_input, signature)."""
    parts = token.split(".")
    if len(parts) != 3:
        raise JWTError("not three parts")
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except Exception as e:  # noqa: BLE001 - any decoding failure is an invalid token
        raise JWTError("undecodable: %s" % e)
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise JWTError("header or claims not an object")
    return header, claims, (parts[0] + "." + parts[1]).encode("ascii"), signature


def verify_es256(public_key, signing_input, signature):
    if len(signature) != 64:
        raise JWTError("ES256 signature must be 64 bytes (r||s), got %d" % len(signature))
    der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
    try:
        public_key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise JWTError("bad signature")


def verify_rs256(public_key, signing_input, signature):
    try:
        public_key.verify(signature, signing_input, padding.PKCS1v15(), hashes.SHA256())
    except InvalidSignature:
        raise JWTError("bad signature")


def load_public_key(path):
    with open(path, "rb") as f:
        data = f.read()
    try:
        return serialization.load_pem_public_key(data)
    except ValueError:
        # Also accept the private key (PKCS#8 .p8 / PEM) and take its public half.
        return serialization.load_pem_private_key(data, password=None).public_key()


def new_listener_stats():
    return {"requests": 0, "status": {}, "reasons": {}, "connections": 0, "openConnections": 0,
            "maxConcurrentStreamsSeen": 0, "refusedStreams": 0, "goaways": 0, "resetByClient": 0,
            "unanswered": 0}


class Answer:
    __slots__ = ("status", "headers", "body", "reason")

    def __init__(self, status, headers=None, body=None, reason=None):
        self.status = status
        self.headers = headers or []
        self.body = body          # dict (JSON) or None
        self.reason = reason      # APNs reason / FCM errorCode / OAuth error, for stats


class App:
    def __init__(self, args):
        self.args = args
        self.apns_key = load_public_key(args.apns_key_pem)
        self.fcm_key = load_public_key(args.fcm_public_key_pem)
        if not isinstance(self.apns_key, ec.EllipticCurvePublicKey):
            raise SystemExit("push_mock: --apns-key-pem is not an EC key")
        if not isinstance(self.fcm_key, rsa.RSAPublicKey):
            raise SystemExit("push_mock: --fcm-public-key-pem is not an RSA key")
        self.allowed_topics = set(t for t in (args.apns_topics or "").split(",") if t)
        self.max_streams = args.max_concurrent_streams
        self.delay_ms = 0
        self.ports = {}
        self.conns = set()
        self.conn_seq = 0
        self.access_tokens = {}     # access token -> (expires_at, scope)
        self.verified_jwts = {}     # APNs JWT string -> claims (signature and header already checked)
        self.reset_state()

    def reset_state(self):
        self.requests = []
        self.seq = 0
        self.token_counts = {}
        self.stale_jwts = set()
        self.provider_tokens = {}   # JWT string -> iat, for the ones accepted
        self.stats = {name: new_listener_stats() for name in LISTENERS[:3]}
        self.tokens_issued = 0
        for c in self.conns:
            if c.listener in self.stats:
                self.stats[c.listener]["openConnections"] += 1

    # ---- bookkeeping -------------------------------------------------------------------
    def fcm_token_uri(self):
        return "https://127.0.0.1:%d/token" % self.ports["fcm"]

    def count_attempt(self, kind, token):
        key = (kind, token)
        n = self.token_counts.get(key, 0) + 1
        self.token_counts[key] = n
        return n

    def record(self, listener, conn, stream_id, req, answer, extra):
        self.seq += 1
        st = self.stats[listener]
        st["requests"] += 1
        st["status"][str(answer.status)] = st["status"].get(str(answer.status), 0) + 1
        if answer.reason:
            st["reasons"][answer.reason] = st["reasons"].get(answer.reason, 0) + 1
        headers = {}
        for k, v in req["headers"]:
            if not k.startswith(":"):
                headers[k] = v
        entry = {
            "seq": self.seq, "time": round(now(), 6), "listener": listener,
            "connection": conn.id, "stream": stream_id, "http": conn.http_version,
            "method": req["method"], "path": req["path"], "headers": headers,
            "body": None, "bodyBytes": len(req["body"]),
            "response": {"status": answer.status, "headers": dict(answer.headers), "body": answer.body},
            "reason": answer.reason, "sent": False,
        }
        entry.update(extra)
        if "body" not in extra:
            try:
                entry["body"] = json.loads(req["body"]) if req["body"] else None
            except ValueError:
                entry["bodyText"] = req["body"].decode("utf-8", "replace")
        self.requests.append(entry)
        return entry

    # ---- dispatch -----------------------------------------------------------------------
    def answer(self, listener, req):
        """Decide the answer at once (per-token state moves here); returns (Answer, extra)."""
        if listener == "fcm":
            return self.fcm(req)
        return self.apns("production" if listener == "apnsProduction" else "development", req)

    # ---- APNs ---------------------------------------------------------------------------
    def apns(self, env, req):
        hmap, dups = {}, set()
        for k, v in req["headers"]:
            if k in hmap and not k.startswith(":"):
                dups.add(k)
            hmap[k] = v
        extra = {"warnings": []}
        given_id = hmap.get("apns-id")
        reply_id = given_id if given_id and UUID_RE.match(given_id) else str(uuid.uuid4())
        base = [("apns-id", reply_id)]
        if env == "development":
            base.append(("apns-unique-id", str(uuid.uuid4())))

        def err(status, reason, more=None, headers=()):
            body = {"reason": reason}
            if more:
                body.update(more)
            return Answer(status, base + [("content-type", "application/json")] + list(headers), body, reason), extra

        m = APNS_PATH.match(req["path"])
        token = m.group(1) if m else None
        extra["token"] = token
        if req["method"] != "POST":
            return err(405, "MethodNotAllowed")
        if not m:
            return err(404, "BadPath")
        if not token:
            return err(400, "MissingDeviceToken")
        if dups:
            extra["warnings"].append("repeated headers: " + ", ".join(sorted(dups)))
            return err(400, "DuplicateHeaders")

        auth = self.check_provider_token(hmap.get("authorization"), extra)
        if auth:
            return err(403, auth)
        if given_id is not None and not UUID_RE.match(given_id):
            return err(400, "BadMessageId")
        topic = hmap.get("apns-topic")
        if not topic:
            return err(400, "MissingTopic")
        if self.allowed_topics and topic not in self.allowed_topics:
            return err(400, "TopicDisallowed")
        push_type = hmap.get("apns-push-type")
        if push_type is None:
            extra["warnings"].append("apns-push-type missing (required on watchOS, recommended on iOS)")
            if self.args.strict:
                return err(400, "InvalidPushType")
        elif push_type not in PUSH_TYPES:
            return err(400, "InvalidPushType")
        priority = hmap.get("apns-priority")
        if priority is not None and priority not in ("1", "5", "10"):
            return err(400, "BadPriority")
        if push_type == "background" and priority == "10":
            extra["warnings"].append("background push with apns-priority 10 (Apple asks for 5)")
        expiration = hmap.get("apns-expiration")
        if expiration is not None and not re.fullmatch(r"[0-9]+", expiration):
            return err(400, "BadExpirationDate")
        collapse = hmap.get("apns-collapse-id")
        if collapse is not None and len(collapse.encode("utf-8")) > 64:
            return err(400, "BadCollapseId")
        body = req["body"]
        if not body:
            return err(400, "PayloadEmpty")
        limit = 5120 if push_type == "voip" else 4096
        if len(body) > limit:
            return err(413, "PayloadTooLarge")
        try:
            payload = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("aps"), dict):
            # Not in Apple's table: the mock's own reason, so a malformed payload is loud.
            return err(400, "BadPayload")
        if not HEX_TOKEN.match(token):
            return err(400, "BadDeviceToken")

        marker = APNS_MARKERS.get(token[:4].lower())
        n = self.fail_times(token[4:5])
        if marker == "unregistered":
            return err(410, "Unregistered", {"timestamp": int(now() * 1000) - 86400000})
        if marker == "bad":
            return err(400, "BadDeviceToken")
        if marker == "sandbox" and env == "production":
            return err(400, "BadDeviceToken")
        if marker == "production" and env == "development":
            return err(400, "BadDeviceToken")
        if marker == "nottopic":
            return err(400, "DeviceTokenNotForTopic")
        if marker == "expired":
            if self.count_attempt("apns", token) == 1:
                self.stale_jwts.add(extra["_jwt"])
                self.provider_tokens.pop(extra["_jwt"], None)
                return err(403, "ExpiredProviderToken")
        if marker in ("toomany", "internal", "unavailable"):
            if self.count_attempt("apns", token) <= n:
                if marker == "toomany":
                    return err(429, "TooManyRequests", headers=[("retry-after", str(self.args.retry_after))])
                if marker == "internal":
                    return err(500, "InternalServerError")
                return err(503, "ServiceUnavailable")
        extra["payload"] = payload
        return Answer(200, base, None, None), extra

    def fail_times(self, digit):
        if digit and digit in "123456789abcdefABCDEF":
            return int(digit, 16)
        return self.args.fail_times

    def check_provider_token(self, authorization, extra):
        if not authorization:
            return "MissingProviderToken"
        scheme, _, jwt = authorization.partition(" ")
        jwt = jwt.strip()
        if scheme.lower() != "bearer" or not jwt:
            return "InvalidProviderToken"
        extra["_jwt"] = jwt
        claims = self.verified_jwts.get(jwt)
        if claims is None:
            try:
                header, claims, signing_input, signature = parse_jwt(jwt)
                extra["providerToken"] = {"header": header, "claims": claims}
                if header.get("alg") != "ES256":
                    raise JWTError("alg must be ES256")
                if header.get("kid") != self.args.apns_key_id:
                    raise JWTError("kid is not the key id")
                if claims.get("iss") != self.args.apns_team_id:
                    raise JWTError("iss is not the team id")
                if not isinstance(claims.get("iat"), int) or isinstance(claims.get("iat"), bool):
                    raise JWTError("iat must be an integer number of seconds")
                verify_es256(self.apns_key, signing_input, signature)
            except JWTError as e:
                extra["warnings"].append("provider token: %s" % e)
                return "InvalidProviderToken"
            if len(self.verified_jwts) > 10000:
                self.verified_jwts.clear()
            self.verified_jwts[jwt] = claims
        extra["providerToken"] = {"kid": self.args.apns_key_id, "iss": claims["iss"], "iat": claims["iat"]}
        iat = claims["iat"]
        t = now()
        if iat > t + self.args.clock_skew:
            extra["warnings"].append("provider token: iat in the future")
            return "InvalidProviderToken"
        if t - iat > 3600 or jwt in self.stale_jwts:
            return "ExpiredProviderToken"
        self.provider_tokens[jwt] = iat
        return None

    # ---- FCM ----------------------------------------------------------------------------
    def google_error(self, code, status, message, fcm_code=None, details=None, headers=()):
        err = {"code": code, "message": message, "status": status}
        d = []
        if fcm_code:
            d.append({"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": fcm_code})
        if details:
            d.extend(details)
        if d:
            err["details"] = d
        return Answer(code, [("content-type", "application/json; charset=UTF-8")] + list(headers),
                      {"error": err}, fcm_code or status)

    def fcm(self, req):
        path = req["path"].split("?", 1)[0]
        if path == "/token":
            return self.oauth_token(req)
        m = FCM_SEND_PATH.match(path)
        if not m or req["method"] != "POST":
            return self.google_error(404, "NOT_FOUND", "The requested URL %s was not found on this server." % path), {}
        return self.fcm_send(m.group(1), req)

    def oauth_token(self, req):
        extra = {}

        def oauth_error(error, description, status=400):
            return Answer(status, [("content-type", "application/json; charset=utf-8")],
                          {"error": error, "error_description": description}, error), extra

        if req["method"] != "POST":
            return oauth_error("invalid_request", "Token endpoint only accepts POST", 405)
        try:
            form = dict(urllib.parse.parse_qsl(req["body"].decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            form = {}
        extra["body"] = form
        if form.get("grant_type") != JWT_BEARER:
            return oauth_error("unsupported_grant_type", "Invalid grant_type: %s" % form.get("grant_type", ""))
        assertion = form.get("assertion", "")
        try:
            header, claims, signing_input, signature = parse_jwt(assertion)
        except JWTError:
            return oauth_error("invalid_grant", "Invalid JWT: malformed assertion")
        extra["assertion"] = {"header": header, "claims": claims}
        if header.get("alg") != "RS256":
            return oauth_error("invalid_grant", "Invalid JWT: alg must be RS256")
        try:
            verify_rs256(self.fcm_key, signing_input, signature)
        except JWTError:
            return oauth_error("invalid_grant", "Invalid JWT Signature.")
        if claims.get("iss") != self.args.fcm_client_email:
            return oauth_error("invalid_grant", "Invalid grant: account not found")
        port = self.ports["fcm"]
        if claims.get("aud") not in ("https://127.0.0.1:%d/token" % port, "https://localhost:%d/token" % port):
            return oauth_error("invalid_grant", "Invalid JWT: Failed audience check. The right audience is %s"
                               % self.fcm_token_uri())
        iat, exp = claims.get("iat"), claims.get("exp")
        t = now()
        skew = self.args.clock_skew
        if (not isinstance(iat, int) or not isinstance(exp, int) or exp <= iat or exp - iat > 3600
                or iat > t + skew or exp < t - skew):
            return oauth_error("invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) "
                               "and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
        scopes = set(str(claims.get("scope", "")).split())
        if not scopes:
            return oauth_error("invalid_scope", "Invalid OAuth scope or ID token audience provided.")
        lifetime = self.args.fcm_token_lifetime
        access = "ya29.mock-" + uuid.uuid4().hex + uuid.uuid4().hex
        self.access_tokens[access] = (t + lifetime, scopes)
        self.tokens_issued += 1
        return Answer(200, [("content-type", "application/json; charset=utf-8")],
                      {"access_token": access, "expires_in": lifetime, "token_type": "Bearer"}, None), extra

    def fcm_send(self, project, req):
        extra = {"warnings": []}
        hmap = {}
        for k, v in req["headers"]:
            hmap[k] = v
        auth = hmap.get("authorization", "")
        scheme, _, access = auth.partition(" ")
        entry = self.access_tokens.get(access.strip()) if scheme.lower() == "bearer" else None
        if entry is None or entry[0] <= now():
            extra["warnings"].append("access token %s" % ("missing" if not auth else
                                                           "expired" if entry else "unknown"))
            return self.google_error(
                401, "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential.",
                headers=[("www-authenticate", 'Bearer realm="https://accounts.google.com/", error="invalid_token"')]), extra
        if not (entry[1] & FCM_SCOPES):
            return self.google_error(403, "PERMISSION_DENIED", "Request had insufficient authentication scopes."), extra
        if project != self.args.fcm_project:
            return self.google_error(
                403, "PERMISSION_DENIED",
                "Permission 'cloudmessaging.messages.create' denied on resource "
                "'//cloudresourcemanager.googleapis.com/projects/%s' (or it may not exist)." % project), extra

        def bad(field, description, fcm_code="INVALID_ARGUMENT"):
            return self.google_error(400, "INVALID_ARGUMENT", description, fcm_code, [{
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": description}]}]), extra

        try:
            doc = json.loads(req["body"]) if req["body"] else None
        except ValueError:
            return self.google_error(400, "INVALID_ARGUMENT", "Invalid JSON payload received."), extra
        if not isinstance(doc, dict) or not isinstance(doc.get("message"), dict):
            return bad("message", "Invalid JSON payload received. 'message' must be an object.")
        unknown = set(doc) - {"message", "validate_only", "validateOnly"}
        if unknown:
            return self.google_error(400, "INVALID_ARGUMENT", 'Invalid JSON payload received. Unknown name "%s": '
                                     "Cannot find field." % sorted(unknown)[0]), extra
        msg = doc["message"]
        problem = self.check_message(msg)
        if problem:
            return bad(*problem)
        token = msg.get("token")
        extra["token"] = token
        targets = [k for k in ("token", "topic", "condition") if k in msg]
        if targets != ["token"]:
            return bad("message", "Exactly one of token, topic or condition must be set (the mock knows token only).")
        if not isinstance(token, str) or not token.strip():
            return self.google_error(400, "INVALID_ARGUMENT",
                                     "The registration token is not a valid FCM registration token",
                                     "INVALID_ARGUMENT"), extra

        for prefix, code in FCM_MARKERS:
            if token.startswith(prefix):
                break
        else:
            code = None
        if code in FCM_RETRYABLE:
            mm = re.match(r"([0-9a-fA-F])-", token[len(prefix):])
            n = self.fail_times(mm.group(1) if mm else "")
            if self.count_attempt("fcm", token) > n:
                code = None
        ra = [("retry-after", str(self.args.retry_after))]
        if code == "UNREGISTERED":
            return self.google_error(404, "NOT_FOUND", "Requested entity was not found.", code), extra
        if code == "SENDER_ID_MISMATCH":
            return self.google_error(403, "PERMISSION_DENIED", "SenderId mismatch", code), extra
        if code == "INVALID_ARGUMENT":
            return self.google_error(400, "INVALID_ARGUMENT",
                                     "The registration token is not a valid FCM registration token", code), extra
        if code == "QUOTA_EXCEEDED":
            return self.google_error(429, "RESOURCE_EXHAUSTED",
                                     "Quota exceeded for quota metric 'Send requests' of service "
                                     "'fcm.googleapis.com'.", code, headers=ra), extra
        if code == "UNAVAILABLE":
            return self.google_error(503, "UNAVAILABLE", "The service is currently unavailable.", code,
                                     headers=ra), extra
        if code == "INTERNAL":
            return self.google_error(500, "INTERNAL", "Internal error encountered.", code), extra
        name = "projects/%s/messages/%d" % (project, int(now() * 1e6))
        if doc.get("validate_only") or doc.get("validateOnly"):
            name = "projects/%s/messages/fake_message_id" % project
        return Answer(200, [("content-type", "application/json; charset=UTF-8")], {"name": name}, None), extra

    @staticmethod
    def check_message(msg):
        """Returns (field, description) for the first problem, protobuf-JSON style, or None."""
        known = {"name", "data", "notification", "android", "webpush", "apns", "fcm_options", "fcmOptions",
                 "token", "topic", "condition"}
        for k in msg:
            if k not in known:
                return ("message", 'Invalid JSON payload received. Unknown name "%s" at \'message\': '
                        "Cannot find field." % k)
        data = msg.get("data")
        if data is not None:
            if not isinstance(data, dict):
                return ("message.data", "Invalid value at 'message.data' (type.googleapis.com/google.protobuf.Struct)")
            size = 0
            for i, (k, v) in enumerate(data.items()):
                if not isinstance(v, str):
                    return ("message.data[%d].value" % i,
                            "Invalid value at 'message.data[%d].value' (TYPE_STRING), %s" % (i, json.dumps(v)))
                if k in ("from", "gcm", "message_type") or k.lower().startswith("google"):
                    return ("message.data", "Invalid data payload key: %s" % k)
                size += len(k.encode("utf-8")) + len(v.encode("utf-8"))
            if size > 4096:
                return ("message.data", "Message is too big: data payload is %d bytes, the limit is 4096" % size)
        notification = msg.get("notification")
        if notification is not None:
            if not isinstance(notification, dict):
                return ("message.notification", "Invalid value at 'message.notification'")
            for k, v in notification.items():
                if k not in ("title", "body", "image"):
                    return ("message.notification", 'Invalid JSON payload received. Unknown name "%s" at '
                            "'message.notification': Cannot find field." % k)
                if not isinstance(v, str):
                    return ("message.notification.%s" % k,
                            "Invalid value at 'message.notification.%s' (TYPE_STRING), %s" % (k, json.dumps(v)))
        android = msg.get("android")
        if android is not None:
            if not isinstance(android, dict):
                return ("message.android", "Invalid value at 'message.android'")
            akeys = {"collapse_key", "collapseKey", "priority", "ttl", "restricted_package_name",
                     "restrictedPackageName", "data", "notification", "fcm_options", "fcmOptions",
                     "direct_boot_ok", "directBootOk"}
            for k in android:
                if k not in akeys:
                    return ("message.android", 'Invalid JSON payload received. Unknown name "%s" at '
                            "'message.android': Cannot find field." % k)
            for k in ("collapse_key", "collapseKey"):
                if k in android and not isinstance(android[k], str):
                    return ("message.android.collapse_key", "Invalid value at 'message.android.collapse_key' "
                            "(TYPE_STRING), %s" % json.dumps(android[k]))
            if "priority" in android and android["priority"] not in ("NORMAL", "HIGH", "normal", "high"):
                return ("message.android.priority", "Invalid value at 'message.android.priority' "
                        "(type.googleapis.com/google.firebase.fcm.v1.AndroidMessagePriority), %s"
                        % json.dumps(android["priority"]))
            if "ttl" in android:
                ttl = android["ttl"]
                mm = re.fullmatch(r"([0-9]+)(\.[0-9]{1,9})?s", ttl) if isinstance(ttl, str) else None
                if not mm:
                    return ("message.android.ttl", "Invalid value at 'message.android.ttl' "
                            "(type.googleapis.com/google.protobuf.Duration), %s" % json.dumps(ttl))
                if int(mm.group(1)) > 2419200:
                    return ("message.android.ttl", "TTL must not exceed 4 weeks (2419200s)")
            an = android.get("notification")
            if an is not None:
                if not isinstance(an, dict):
                    return ("message.android.notification", "Invalid value at 'message.android.notification'")
                for k in ("tag", "title", "body", "channel_id", "channelId", "click_action", "clickAction"):
                    if k in an and not isinstance(an[k], str):
                        return ("message.android.notification.%s" % k, "Invalid value at "
                                "'message.android.notification.%s' (TYPE_STRING), %s" % (k, json.dumps(an[k])))
            adata = android.get("data")
            if adata is not None and (not isinstance(adata, dict)
                                      or any(not isinstance(v, str) for v in adata.values())):
                return ("message.android.data", "Invalid value at 'message.android.data': values must be strings")
        return None

    # ---- control ------------------------------------------------------------------------
    def control(self, method, path, body):
        url = urllib.parse.urlsplit(path)
        q = dict(urllib.parse.parse_qsl(url.query))
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            return 400, {"error": "body is not JSON"}
        if not isinstance(doc, dict):
            doc = {}
        p = url.path.rstrip("/") or "/"
        if method == "GET" and p == "/requests":
            since = int(q.get("since", "0"))
            rows = [r for r in self.requests if r["seq"] > since
                    and ("listener" not in q or r["listener"] == q["listener"])]
            return 200, {"count": len(rows), "last": self.seq, "requests": rows}
        if method == "GET" and p == "/stats":
            return 200, self.stats_doc()
        if method == "GET" and p in ("/", "/health", "/ports"):
            return 200, self.ready_doc()
        if method != "POST":
            return 404, {"error": "no such endpoint: %s %s" % (method, p)}
        if p == "/reset":
            self.reset_state()
            return 200, {"ok": True}
        if p == "/goaway":
            only = doc.get("listener")
            n = 0
            for c in list(self.conns):
                if c.h2 and (only is None or c.listener == only) and c.goaway():
                    n += 1
            return 200, {"ok": True, "connections": n}
        if p == "/streams":
            mx = doc.get("max")
            if not isinstance(mx, int) or isinstance(mx, bool) or mx < 0 or mx > 2 ** 31 - 1:
                return 400, {"error": "max must be an integer >= 0"}
            self.max_streams = mx
            n = 0
            for c in list(self.conns):
                if c.h2 and c.update_max_streams(mx):
                    n += 1
            return 200, {"ok": True, "max": mx, "connections": n}
        if p == "/delay":
            ms = doc.get("ms")
            if not isinstance(ms, (int, float)) or isinstance(ms, bool) or ms < 0:
                return 400, {"error": "ms must be a number >= 0"}
            self.delay_ms = ms
            return 200, {"ok": True, "ms": ms}
        if p == "/fcm/revoke":
            n = len(self.access_tokens)
            self.access_tokens.clear()
            return 200, {"ok": True, "revoked": n}
        if p == "/apns/expire":
            n = len(self.provider_tokens)
            self.stale_jwts.update(self.provider_tokens)
            self.provider_tokens.clear()
            return 200, {"ok": True, "expired": n}
        if p == "/shutdown":
            asyncio.get_running_loop().call_later(0.05, SHUTDOWN.set)
            return 200, {"ok": True}
        return 404, {"error": "no such endpoint: %s %s" % (method, p)}

    def stats_doc(self):
        inflight = 0
        for c in self.conns:
            inflight += len(c.inflight)
        return {"listeners": self.stats, "inFlight": inflight, "delayMs": self.delay_ms,
                "maxConcurrentStreams": self.max_streams, "apnsProviderTokens": len(self.provider_tokens),
                "fcmAccessTokensIssued": self.tokens_issued, "requests": self.seq}

    def ready_doc(self):
        d = dict(self.ports)
        d["fcmTokenUri"] = self.fcm_token_uri()
        d["pid"] = os.getpid()
        return d


class Conn(asyncio.Protocol):
    """One client connection: HTTP/2 after ALPN h2, else HTTP/1.1 (control and the FCM host only)."""

    def __init__(self, app, listener):
        self.app = app
        self.listener = listener
        self.transport = None
        self.h2 = None
        self.http_version = None
        self.inflight = set()      # stream ids (or h1 request numbers) whose answer is not sent yet
        self.open = set()          # h2 stream ids accepted and not finished
        self.streams = {}
        self.pending = {}          # stream id -> [bytes, future]
        self.goaway_last = None
        self.closed = False
        self.h1_buf = b""
        self.h1_queue = None

    # ---- common -------------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        self.app.conn_seq += 1
        self.id = self.app.conn_seq
        alpn = None
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is not None:
            alpn = sslobj.selected_alpn_protocol()
        if self.listener != "control":
            st = self.app.stats[self.listener]
            st["connections"] += 1
            st["openConnections"] += 1
        self.app.conns.add(self)
        if alpn == "h2":
            self.http_version = "2"
            self.start_h2()
        elif self.listener in ("control", "fcm"):
            self.http_version = "1.1"
            self.h1_queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self.h1_worker())
        else:
            transport.close()   # APNs speaks HTTP/2 only

    def connection_lost(self, exc):
        self.closed = True
        self.app.conns.discard(self)
        if self.listener != "control":
            self.app.stats[self.listener]["openConnections"] -= 1
        for item in self.pending.values():
            if not item[1].done():
                item[1].set_result(False)
        self.pending.clear()
        if self.h1_queue is not None:
            self.h1_queue.put_nowait(None)

    def data_received(self, data):
        if self.h2 is not None:
            self.h2_received(data)
        elif self.h1_queue is not None:
            self.h1_buf += data
            self.h1_parse()

    # ---- HTTP/2 -------------------------------------------------------------------------
    def start_h2(self):
        config = h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        self.h2 = MockH2Connection(config=config)
        self.h2.local_settings = h2.settings.Settings(client=False, initial_values={
            h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.app.max_streams,
            h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 65536,
        })
        self.h2.initiate_connection()
        self.flush()

    def flush(self):
        if self.h2 is not None and not self.closed:
            data = self.h2.data_to_send()
            if data:
                self.transport.write(data)

    def h2_received(self, data):
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            sys.stderr.write("push_mock: %s connection %d: protocol error: %s\n" % (self.listener, self.id, e))
            self.flush()
            self.transport.close()
            return
        st = self.app.stats[self.listener]
        for ev in events:
            if isinstance(ev, h2.events.RequestReceived):
                sid = ev.stream_id
                if sid in self.h2.over_limit or (self.goaway_last is not None and sid > self.goaway_last):
                    self.h2.over_limit.discard(sid)
                    st["refusedStreams"] += 1
                    self.h2.reset_stream(sid, ErrorCodes.REFUSED_STREAM)
                    continue
                self.open.add(sid)
                self.streams[sid] = {"headers": ev.headers, "body": bytearray()}
                if len(self.open) > st["maxConcurrentStreamsSeen"]:
                    st["maxConcurrentStreamsSeen"] = len(self.open)
            elif isinstance(ev, h2.events.DataReceived):
                try:
                    self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                    pass
                s = self.streams.get(ev.stream_id)
                if s is not None and len(s["body"]) < MAX_BODY:
                    s["body"] += ev.data
            elif isinstance(ev, h2.events.StreamEnded):
                s = self.streams.pop(ev.stream_id, None)
                if s is not None:
                    self.inflight.add(ev.stream_id)
                    asyncio.get_running_loop().create_task(self.h2_respond(ev.stream_id, s))
            elif isinstance(ev, h2.events.StreamReset):
                sid = ev.stream_id
                if sid in self.open:
                    st["resetByClient"] += 1
                self.streams.pop(sid, None)
                self.open.discard(sid)
                item = self.pending.pop(sid, None)
                if item and not item[1].done():
                    item[1].set_result(False)
            elif isinstance(ev, h2.events.WindowUpdated):
                for sid in list(self.pending) if ev.stream_id == 0 else [ev.stream_id]:
                    self.pump(sid)
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.flush()
                self.transport.close()
                return
        self.flush()
        self.maybe_close()

    async def h2_respond(self, sid, s):
        headers = s["headers"]
        hmap = dict(headers)
        req = {"method": hmap.get(":method", ""), "path": hmap.get(":path", ""),
               "headers": headers, "body": bytes(s["body"])}
        answer, extra = self.app.answer(self.listener, req)
        extra.pop("_jwt", None)
        entry = self.app.record(self.listener, self, sid, req, answer, extra)
        sent = False
        try:
            if self.app.delay_ms:
                await asyncio.sleep(self.app.delay_ms / 1000.0)
            if self.closed or sid not in self.open:
                return
            body = json.dumps(answer.body).encode() if answer.body is not None else b""
            hdrs = [(":status", str(answer.status))] + answer.headers
            if body:
                hdrs.append(("content-length", str(len(body))))
            try:
                self.h2.send_headers(sid, hdrs, end_stream=not body)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                return
            if body:
                fut = asyncio.get_running_loop().create_future()
                self.pending[sid] = [body, fut]
                self.pump(sid)
                self.flush()
                sent = await fut
            else:
                sent = True
            self.flush()
        finally:
            entry["sent"] = sent
            if not sent:
                self.app.stats[self.listener]["unanswered"] += 1
            self.inflight.discard(sid)
            self.open.discard(sid)
            self.maybe_close()

    def pump(self, sid):
        item = self.pending.get(sid)
        if item is None or self.closed:
            return
        data = item[0]
        try:
            while data:
                n = min(self.h2.local_flow_control_window(sid), self.h2.max_outbound_frame_size, len(data))
                if n <= 0:
                    break
                self.h2.send_data(sid, data[:n])
                data = data[n:]
            if not data:
                self.h2.end_stream(sid)
                del self.pending[sid]
                item[1].set_result(True)
            else:
                item[0] = data
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self.pending.pop(sid, None)
            if not item[1].done():
                item[1].set_result(False)

    def goaway(self):
        if self.closed or self.goaway_last is not None:
            return False
        self.goaway_last = self.h2.highest_inbound_stream_id
        self.flush()
        extra = b'{"reason":"Shutdown"}' if self.listener != "fcm" else b""
        # Written past h2's state machine so that the streams below last_stream_id still get answers.
        frame = GoAwayFrame(stream_id=0, last_stream_id=self.goaway_last, error_code=0, additional_data=extra)
        self.transport.write(frame.serialize())
        self.app.stats[self.listener]["goaways"] += 1
        asyncio.get_running_loop().call_later(10.0, self.force_close)
        self.maybe_close()
        return True

    def maybe_close(self):
        if self.goaway_last is not None and not self.closed and not self.open and not self.inflight:
            asyncio.get_running_loop().call_later(0.1, self.force_close)

    def force_close(self):
        if not self.closed:
            self.flush()
            self.transport.close()

    def update_max_streams(self, n):
        if self.closed or self.goaway_last is not None:
            return False
        try:
            self.h2.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: n})
        except h2.exceptions.ProtocolError:
            return False
        self.flush()
        return True

    # ---- HTTP/1.1 (control; FCM fallback) -----------------------------------------------
    def h1_parse(self):
        while True:
            end = self.h1_buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.h1_buf) > 65536:
                    self.transport.close()
                return
            head = self.h1_buf[:end].decode("latin-1").split("\r\n")
            try:
                method, target, _version = head[0].split(" ", 2)
            except ValueError:
                self.transport.close()
                return
            headers = []
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers.append((k.strip().lower(), v.strip()))
            hmap = dict(headers)
            length = int(hmap.get("content-length", "0") or 0)
            if len(self.h1_buf) < end + 4 + length:
                return
            body = self.h1_buf[end + 4:end + 4 + length]
            self.h1_buf = self.h1_buf[end + 4 + length:]
            self.h1_queue.put_nowait((method, target, headers, body, hmap.get("connection", "").lower() == "close"))

    async def h1_worker(self):
        n = 0
        while True:
            item = await self.h1_queue.get()
            if item is None or self.closed:
                return
            method, target, headers, body, close = item
            n += 1
            if self.listener == "control":
                status, doc = self.app.control(method, target, body)
                out = json.dumps(doc).encode()
                rh = [("content-type", "application/json")]
            else:
                req = {"method": method, "path": target, "headers": headers, "body": body}
                answer, extra = self.app.answer(self.listener, req)
                extra.pop("_jwt", None)
                entry = self.app.record(self.listener, self, n, req, answer, extra)
                self.inflight.add(n)
                if self.app.delay_ms:
                    await asyncio.sleep(self.app.delay_ms / 1000.0)
                self.inflight.discard(n)
                status = answer.status
                out = json.dumps(answer.body).encode() if answer.body is not None else b""
                rh = answer.headers
                entry["sent"] = not self.closed
            if self.closed:
                return
            lines = ["HTTP/1.1 %d %s" % (status, REASONS.get(status, "Status"))]
            lines += ["%s: %s" % (k, v) for k, v in rh]
            lines += ["content-length: %d" % len(out), "connection: %s" % ("close" if close else "keep-alive")]
            self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + out)
            if close:
                self.transport.close()
                return


REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           405: "Method Not Allowed", 410: "Gone", 413: "Payload Too Large", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}


class _NoStreamLimit:
    """A view of h2's local settings without the stream limit, so that h2 decodes (HPACK state!) and
    tracks a stream past the limit; the mock then refuses it with RST_STREAM(REFUSED_STREAM)."""

    def __init__(self, settings):
        self._settings = settings

    max_concurrent_streams = 2 ** 31 - 1

    def __getattr__(self, name):
        return getattr(self._settings, name)


class MockH2Connection(h2.connection.H2Connection):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.over_limit = set()

    def _receive_headers_frame(self, frame):
        if frame.stream_id not in self.streams and frame.stream_id % 2 == 1:
            if self.open_inbound_streams + 1 > self.local_settings.max_concurrent_streams:
                self.over_limit.add(frame.stream_id)
        saved = self.local_settings
        self.local_settings = _NoStreamLimit(saved)
        try:
            return super()._receive_headers_frame(frame)
        finally:
            self.local_settings = saved


SHUTDOWN = None


def tls_context(args, alpn):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.cert, args.key)
    ctx.set_alpn_protocols(alpn)
    ctx.options |= ssl.OP_NO_COMPRESSION
    return ctx


async def main(args):
    global SHUTDOWN
    SHUTDOWN = asyncio.Event()
    loop = asyncio.get_running_loop()
    app = App(args)
    servers = []
    for name in LISTENERS:
        if name == "control":
            ctx = None
        elif name == "fcm":
            ctx = tls_context(args, ["h2", "http/1.1"])
        else:
            ctx = tls_context(args, ["h2"])
        srv = await loop.create_server(lambda name=name: Conn(app, name), "127.0.0.1", 0, ssl=ctx,
                                       backlog=512)
        app.ports[name] = srv.sockets[0].getsockname()[1]
        servers.append(srv)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, SHUTDOWN.set)
    # Closing stdin ends the mock when stdin is a pipe or socket (a test runner's Pipe);
    # /dev/null or a terminal is not watched, so running it in the background is safe.
    try:
        mode = os.fstat(0).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            def stdin_readable():
                try:
                    chunk = os.read(0, 4096)
                except OSError:
                    chunk = b""
                if not chunk:
                    loop.remove_reader(0)
                    SHUTDOWN.set()
            loop.add_reader(0, stdin_readable)
    except OSError:
        pass
    if args.parent_pid:
        async def watch_parent():
            while not SHUTDOWN.is_set():
                await asyncio.sleep(0.5)
                try:
                    os.kill(args.parent_pid, 0)
                except ProcessLookupError:
                    SHUTDOWN.set()
                except PermissionError:
                    pass
        loop.create_task(watch_parent())

    ready = json.dumps(app.ready_doc())
    tmp = args.ready_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(ready + "\n")
    os.replace(tmp, args.ready_file)
    sys.stdout.write(ready + "\n")
    sys.stdout.flush()

    await SHUTDOWN.wait()
    for srv in servers:
        srv.close()
    for c in list(app.conns):
        if c.transport:
            c.transport.abort()


def parse_args(argv):
    p = argparse.ArgumentParser(description="APNs and FCM HTTP v1 mock servers (HTTP/2 over TLS).")
    p.add_argument("--cert", required=True, help="server certificate chain, PEM")
    p.add_argument("--key", required=True, help="server private key, PEM")
    p.add_argument("--apns-key-pem", required=True, help="APNs provider key: public PEM (or the .p8 itself)")
    p.add_argument("--apns-key-id", required=True, help="kid the provider tokens must carry")
    p.add_argument("--apns-team-id", required=True, help="iss the provider tokens must carry")
    p.add_argument("--apns-topics", default="", help="comma-separated topics; others get 400 TopicDisallowed "
                   "(default: any topic)")
    p.add_argument("--fcm-project", required=True)
    p.add_argument("--fcm-client-email", required=True)
    p.add_argument("--fcm-public-key-pem", required=True, help="service account public key, PEM")
    p.add_argument("--fcm-token-lifetime", type=int, default=3600, help="access token lifetime, seconds")
    p.add_argument("--ready-file", required=True, help="JSON with the ports is written here when ready")
    p.add_argument("--max-concurrent-streams", type=int, default=1000, help="initial SETTINGS_MAX_CONCURRENT_STREAMS")
    p.add_argument("--fail-times", type=int, default=2, help="default N for the retryable markers")
    p.add_argument("--retry-after", type=int, default=1, help="Retry-After seconds on 429 (and FCM 503)")
    p.add_argument("--clock-skew", type=int, default=60, help="seconds an iat may be in the future")
    p.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone")
    p.add_argument("--strict", action="store_true", help="a missing apns-push-type is 400 InvalidPushType")
    return p.parse_args(argv)


if __name__ == "__main__":
    try:
        asyncio.run(main(parse_args(sys.argv[1:])))
    except KeyboardInterrupt:
        pass
