#!/usr/bin/env python3
"""The app guide's path (shared/seeds/app-guide.md, sections 3 to 6) through a client that
openapi-python-client generated from the tier's own /openapi.json: the buyer signs in with a
password, registers the phone, reads the bell, starts a thread about a watch and writes again; a
person who works at the watch's shop signs in, finds the thread on the seller side and reads both
messages; neither bell shows the messages (a buyer's message is the shop's news, push only).

Run by scripts/client-test.sh (`make test-client`) against a fresh `inbox run`. Every operation of
the tier goes through the generated code: each api module's `sync_detailed`, each request body built
by the operation's own generated model. Only the set-up a real app never does (the website's
sign-ups and the catalogue's events, with service credentials) may fall back to plain HTTP, and only
where the generator did not make the operation. An operation of the path the generator skipped is a
failure.

Success answers are read from the generated model where it is typed (`parsed.to_dict()`), and
from the answer's bytes where the document's schema is the generic `Document` (`data` of any
shape); the summary says which steps read which.
"""

import argparse
import base64
import enum
import importlib
import inspect
import json
import os
import pkgutil
import re
import sys
import time
import types
import typing
import uuid

import attrs
import httpx

APP = "ios/2.4.0"
CLIENT_ID = "wristler-app"  # the development client (docs/identity.md, "Scopes and clients")
# What the app guide (section 6) tells the app to ask for at sign-in.
APP_SCOPES = (
    "account:read account:write account-security:write checkout:write catalogue:read "
    "content:read messages:read messages:write uploads:write"
)
SHOP_SCOPES = "account:read messages:read messages:write"

# The operations of the path: the generated client must have each of them.
PATH_OPERATIONS = [
    ("POST", "/oauth/token"),
    ("POST", "/v1/me/devices"),
    ("GET", "/v1/me/notifications"),
    ("POST", "/v1/conversations"),
    ("POST", "/v1/conversations/{id}/messages"),
    ("GET", "/v1/conversations"),
    ("GET", "/v1/conversations/{id}/messages"),
]
# Other tiers' calls that set the scene: generated code when the generator made them.
SETUP_OPERATIONS = [("POST", "/internal/v1/accounts"), ("POST", "/internal/v1/events")]


class Failure(Exception):
    pass


def say(line):
    print("client-test: " + line, flush=True)


def template(path):
    """A path with its parameters' names blanked: the generated code names them in Python."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def dig(document, *keys, what=""):
    """document[k1][k2]...: a missing member fails naming the path and showing the document."""
    value = document
    for i, key in enumerate(keys):
        try:
            value = value[key]
        except (KeyError, IndexError, TypeError):
            path = "".join("[%r]" % k for k in keys[: i + 1])
            raise Failure("%s: no %s in %s" % (what, path, json.dumps(document)[:1500]))
    return value


def expect(condition, message):
    if not condition:
        raise Failure(message)


# -- the generated package ---------------------------------------------------------------------


class Generated:
    """The generated package's operations, found by their method and path (not by operationId or tag,
    which the document may rename): each api module's _get_kwargs names both."""

    def __init__(self, package, document, generator_log):
        self.package = package
        self.client_module = importlib.import_module(package + ".client")
        api = importlib.import_module(package + ".api")
        self.modules = {}
        for info in pkgutil.walk_packages(api.__path__, api.__name__ + "."):
            if info.ispkg:
                continue
            module = importlib.import_module(info.name)
            found = re.search(r'"method":\s*"(\w+)",\s*"url":\s*f?"([^"]*)"', inspect.getsource(module))
            if found:
                self.modules[(found.group(1).upper(), template(found.group(2)))] = module
        self.document_operations = [
            (method.upper(), path)
            for path, item in document.get("paths", {}).items()
            for method in item
            if method in ("get", "put", "post", "patch", "delete", "head", "options", "trace")
        ]
        self.skipped = [(m, p) for (m, p) in self.document_operations if (m, template(p)) not in self.modules]
        with open(generator_log, encoding="utf-8", errors="replace") as f:
            self.log = f.read()
        # Operations the generator made only in part (a response or a parameter left out).
        said = set(re.findall(r"^WARNING parsing (\w+) (\S+) within", self.log, re.MULTILINE))
        self.partial = [(m, p) for (m, p) in self.document_operations if (m, p) in said and (m, p) not in self.skipped]

    def has(self, method, path):
        return (method, template(path)) in self.modules

    def module(self, method, path):
        module = self.modules.get((method, template(path)))
        if module is None:
            raise Failure("the generated client has no %s %s" % (method, path))
        return module

    def reasons(self, method, path):
        """The generator's own lines about an operation it skipped."""
        pattern = re.compile(r"WARNING parsing %s %s(?=\s|$)" % (re.escape(method), re.escape(path)))
        lines = self.log.splitlines()
        for i, line in enumerate(lines):
            if pattern.search(line):
                block = []
                for following in lines[i:]:
                    text = following.strip()
                    if (text.startswith("WARNING parsing") and block) or text.startswith("If you believe"):
                        break
                    if text and not text.startswith(("{", "}", '"', "]", "[")):
                        block.append(text)
                return block[:6]
        return []


def annotation_of(module, parameter):
    annotation = parameter.annotation
    if isinstance(annotation, str):
        annotation = eval(annotation, vars(module))  # noqa: S307 (generated code's own annotation)
    return annotation


def members(annotation):
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return list(typing.get_args(annotation))
    return [annotation]


def squeeze(name):
    return re.sub(r"[^a-z0-9]", "", name.lower())


# Which steps read a typed model and which the generic Document's bytes.
TYPED = []
GENERIC = []
NOTES = []
PASSED = [0]  # the checks of the path that passed, for the closing line


def is_generic(model):
    if not attrs.has(type(model)):
        return True
    fields = {f.name: f for f in attrs.fields(type(model)) if f.name != "additional_properties"}
    if not fields:
        return True
    data = fields.get("data")
    return data is not None and re.search(r"\bAny\b", str(data.type)) is not None


def differences(typed, raw, where=""):
    """Members the answer had that the typed model did not give back (or the other way)."""
    found = []
    if isinstance(typed, dict) and isinstance(raw, dict):
        for key in sorted(set(raw) - set(typed)):
            found.append("%s/%s dropped" % (where, key))
        for key in sorted(set(typed) - set(raw)):
            found.append("%s/%s added" % (where, key))
        for key in sorted(set(raw) & set(typed)):
            found += differences(typed[key], raw[key], "%s/%s" % (where, key))
    elif isinstance(typed, list) and isinstance(raw, list):
        if len(typed) != len(raw):
            found.append("%s: %d items, the answer had %d" % (where, len(typed), len(raw)))
        for i, (t, r) in enumerate(zip(typed, raw)):
            found += differences(t, r, "%s/%d" % (where, i))
    return found


class Call:
    """One operation through the generated code: its body built by its own model, its query and
    header parameters by their generated names, 503s honoured as the app would (Retry-After)."""

    def __init__(self, generated, method, path):
        self.generated = generated
        self.method, self.path = method, path
        self.module = generated.module(method, path)
        self.function = self.module.sync_detailed
        self.signature = inspect.signature(self.function)

    def body(self, document):
        parameter = self.signature.parameters.get("body")
        if parameter is None:
            raise Failure("%s %s: the generated sync_detailed takes no body" % (self.method, self.path))
        for candidate in members(annotation_of(self.module, parameter)):
            if hasattr(candidate, "from_dict"):
                model = candidate.from_dict(document)
                again = model.to_dict()
                expect(
                    again == document,
                    "%s %s: the generated body model %s does not carry the request: %s became %s"
                    % (self.method, self.path, candidate.__name__, json.dumps(document), json.dumps(again, default=str)),
                )
                return model
        raise Failure("%s %s: no generated model for the body (%s)" % (self.method, self.path, parameter.annotation))

    def argument(self, name, value):
        """A query or header parameter, by its name in the document (filter[side], Idempotency-Key)."""
        for parameter in self.signature.parameters.values():
            if squeeze(parameter.name) == squeeze(name):
                for candidate in members(annotation_of(self.module, parameter)):
                    if isinstance(candidate, type) and issubclass(candidate, enum.Enum):
                        return parameter.name, candidate(value)
                return parameter.name, value
        raise Failure(
            "%s %s: the generated sync_detailed has no parameter for %s (it takes %s)"
            % (self.method, self.path, name, ", ".join(self.signature.parameters))
        )

    def __call__(self, client, *path_values, body=None, parameters=None, expected=(200,), step=""):
        arguments = {"client": client}
        if body is not None:
            arguments["body"] = self.body(body)
        for name, value in (parameters or {}).items():
            key, converted = self.argument(name, value)
            arguments[key] = converted
        for _ in range(20):
            try:
                response = self.function(*path_values, **arguments)
            except (KeyError, ValueError, TypeError, AttributeError) as error:
                raise Failure(
                    "%s: the generated code could not read the answer of %s %s: %s: %s"
                    % (step, self.method, self.path, type(error).__name__, error)
                )
            if int(response.status_code) == 503 and 503 not in expected:
                time.sleep(min(float(response.headers.get("Retry-After", "1") or 1), 2.0))
                continue
            break
        status = int(response.status_code)
        expect(
            status in expected,
            "%s: %s %s answered %d, not %s: %s"
            % (step, self.method, self.path, status, " or ".join(map(str, expected)), response.content[:1500].decode("utf-8", "replace")),
        )
        if not response.content:
            return status, None
        parsed = response.parsed
        expect(parsed is not None, "%s: the generated code parsed nothing from %s %s's %d" % (step, self.method, self.path, status))
        if is_generic(parsed):
            GENERIC.append("%s %s" % (self.method, self.path))
            return status, json.loads(response.content)
        TYPED.append("%s %s (%s)" % (self.method, self.path, type(parsed).__name__))
        document = parsed.to_dict()
        for difference in differences(document, json.loads(response.content))[:10]:
            NOTES.append("%s %s: the typed model %s: %s" % (self.method, self.path, type(parsed).__name__, difference))
        return status, document


# -- the path ----------------------------------------------------------------------------------


def linked(resource, attribute, relationship, what):
    """A thread's watch or shop: its relationship's linkage (relationships.watch.data.id), which
    the attribute of /v1's first answers (watchId, shopId) repeats."""
    attributes = resource.get("attributes") or {}
    data = ((resource.get("relationships") or {}).get(relationship) or {}).get("data")
    if not isinstance(data, dict) or "id" not in data:
        raise Failure("%s: the thread has no relationships.%s.data: %s" % (what, relationship, json.dumps(resource)[:400]))
    if attributes.get(attribute) != data["id"]:
        raise Failure("%s: attributes.%s is %r, relationships.%s.data.id %r" % (what, attribute, attributes.get(attribute), relationship, data["id"]))
    return data["id"]


def claims(access_token):
    payload = access_token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def run(arguments):
    with open(arguments.document, encoding="utf-8") as f:
        document = json.load(f)
    generated = Generated(arguments.package, document, arguments.generator_log)

    # 0. What the generator made of the document.
    say(
        "the document has %d operations; the generator made %d, skipped %d"
        % (len(generated.document_operations), len(generated.document_operations) - len(generated.skipped), len(generated.skipped))
    )
    for what, operations in (("skipped by the generator", generated.skipped), ("made in part (warnings)", generated.partial)):
        for method, path in operations:
            role = (
                "an operation of the path"
                if (method, path) in PATH_OPERATIONS
                else "set-up (plain HTTP instead)"
                if (method, path) in SETUP_OPERATIONS and what.startswith("skipped")
                else "set-up"
                if (method, path) in SETUP_OPERATIONS
                else "not used here"
            )
            say("  %s: %s %s (%s)" % (what, method, path, role))
            for line in generated.reasons(method, path):
                say("    | " + line)
    missing = [(m, p) for (m, p) in PATH_OPERATIONS if not generated.has(m, p)]
    expect(not missing, "the generated client lacks operations of the path: %s" % ", ".join("%s %s" % o for o in missing))
    partial = [(m, p) for (m, p) in PATH_OPERATIONS + SETUP_OPERATIONS if (m, p) in generated.partial]
    expect(not partial, "the generator made operations this test uses only in part: %s" % ", ".join("%s %s" % o for o in partial))
    say("ok   every operation of the path is in the generated client, whole")
    PASSED[0] += 1

    base = arguments.base_url
    client_module = generated.client_module
    timeout = httpx.Timeout(30.0)
    app = client_module.Client(base_url=base, headers={"X-Wristler-App": APP}, timeout=timeout)
    website = client_module.AuthenticatedClient(base_url=base, token=os.environ["CLIENT_WEBSITE_SECRET"], timeout=timeout)
    catalogue = client_module.AuthenticatedClient(base_url=base, token=os.environ["CLIENT_CATALOGUE_SECRET"], timeout=timeout)
    run_id = uuid.uuid4().hex[:10]
    shop, watch = "shop-%s" % run_id, "watch-%s" % run_id

    # Set-up: the website's sign-ups, then the catalogue's shop member and watch for sale.
    people = {}
    for who, given in (("buyer", "Bea"), ("member", "Maarten")):
        email = "%s-%s@example.com" % (who, run_id)
        password = "correct horse %s %s" % (who, run_id)
        sign_up = {
            "data": {"type": "accounts", "attributes": {"email": email, "password": password, "givenName": given, "emailVerified": True}}
        }
        step = "set-up: the website signs up the %s" % who
        if generated.has("POST", "/internal/v1/accounts"):
            _, answer = Call(generated, "POST", "/internal/v1/accounts")(website, body=sign_up, expected=(201,), step=step)
        else:
            response = website.get_httpx_client().post(
                "/internal/v1/accounts", content=json.dumps(sign_up), headers={"Content-Type": "application/vnd.api+json"}
            )
            expect(response.status_code == 201, "%s: %d %s" % (step, response.status_code, response.text[:800]))
            answer = response.json()
        expect(dig(answer, "data", "type", what=step) == "accounts", "%s: data.type is not accounts" % step)
        person_id = dig(answer, "data", "id", what=step)
        expect(dig(answer, "data", "attributes", "email", what=step) == email, "%s: the account's email is not %s" % (step, email))
        people[who] = {"id": person_id, "email": email, "password": password}
    say("ok   set-up: the website signed up the buyer (%s) and the shop's member (%s)" % (people["buyer"]["id"], people["member"]["id"]))
    PASSED[0] += 1

    def event(stream, kind, payload):
        return {
            "type": "events",
            "attributes": {
                "stream": stream,
                "eventType": kind,
                "payload": payload,
                "idempotencyKey": "client-test:%s:%s" % (stream, kind),
                "metadata": {"origin": "web"},
            },
        }

    batch = {
        "data": [
            event("shop-" + shop, "shop_member_added", {"shopId": shop, "personId": people["member"]["id"]}),
            event("watch-" + watch, "watch_status_changed", {"watchId": watch, "shopId": shop, "status": "for_sale"}),
        ]
    }
    step = "set-up: the catalogue's events"
    if generated.has("POST", "/internal/v1/events"):
        _, answer = Call(generated, "POST", "/internal/v1/events")(catalogue, body=batch, expected=(201,), step=step)
        how = "generated code"
    else:
        response = catalogue.get_httpx_client().post(
            "/internal/v1/events", content=json.dumps(batch), headers={"Content-Type": "application/vnd.api+json"}
        )
        expect(response.status_code == 201, "%s: %d %s" % (step, response.status_code, response.text[:800]))
        answer = response.json()
        how = "plain HTTP: the generator skipped the operation"
    appended = [dig(item, "attributes", "appended", what=step) for item in dig(answer, "data", what=step)]
    expect(appended == [True, True], "%s: appended %s, not [true, true]" % (step, appended))
    say("ok   set-up: the catalogue put %s to work at %s and %s up for sale (%s)" % (people["member"]["id"], shop, watch, how))
    PASSED[0] += 1

    token = Call(generated, "POST", "/oauth/token")

    def sign_in(who, scopes, device):
        step = "the %s signs in" % who
        _, answer = token(
            app,
            body={
                "grant_type": "urn:wristler:native-login",
                "client_id": CLIENT_ID,
                "username": people[who]["email"],
                "password": people[who]["password"],
                "scope": scopes,
                "device": device,
            },
            expected=(200,),
            step=step,
        )
        expect(answer.get("token_type") == "Bearer", "%s: token_type %r" % (step, answer.get("token_type")))
        expect(answer.get("expires_in") == 3600, "%s: expires_in %r, not 3600" % (step, answer.get("expires_in")))
        expect(bool(answer.get("refresh_token")), "%s: no refresh_token" % step)
        expect(
            set(answer.get("scope", "").split()) == set(scopes.split()), "%s: scope %r, asked for %r" % (step, answer.get("scope"), scopes)
        )
        access = answer["access_token"]
        said = claims(access)
        expect(
            said.get("sub") == people[who]["id"],
            "%s: the token's sub %r is not the account %r" % (step, said.get("sub"), people[who]["id"]),
        )
        expect(said.get("client_id") == CLIENT_ID, "%s: the token's client_id %r" % (step, said.get("client_id")))
        expect(bool(said.get("sid")), "%s: the token names no session (sid)" % step)
        client = client_module.AuthenticatedClient(base_url=base, token=access, headers={"X-Wristler-App": APP}, timeout=timeout)
        return client, said["sid"]

    # 1. The buyer signs in (guide section 3).
    buyer, buyer_session = sign_in("buyer", APP_SCOPES, "Bea's iPhone")
    say("ok   the buyer signs in with a password (POST /oauth/token 200, scope as asked, session %s)" % buyer_session)
    PASSED[0] += 1

    # 2. Registers the phone for push, and again, as the guide says to on every start (section 5).
    devices = Call(generated, "POST", "/v1/me/devices")
    push_token = os.urandom(32).hex()
    registration = {
        "data": {
            "type": "devices",
            "attributes": {"platform": "ios", "pushToken": push_token, "appVersion": "2.4.0", "name": "Bea's iPhone", "locale": "en"},
        }
    }
    step = "the buyer registers the phone"
    _, answer = devices(buyer, body=registration, expected=(201,), step=step)
    device_id = dig(answer, "data", "id", what=step)
    attributes = dig(answer, "data", "attributes", what=step)
    expect(dig(answer, "data", "type", what=step) == "devices", "%s: data.type is not devices" % step)
    for name, value in (("platform", "ios"), ("appVersion", "2.4.0"), ("name", "Bea's iPhone"), ("locale", "en")):
        expect(attributes.get(name) == value, "%s: %s is %r, not %r" % (step, name, attributes.get(name), value))
    expect("pushToken" not in attributes, "%s: the answer shows the push token" % step)
    _, again = devices(buyer, body=registration, expected=(200,), step="the buyer registers the phone again")
    expect(dig(again, "data", "id", what=step) == device_id, "%s: the same token made another registration" % step)
    say("ok   the buyer registers the phone (POST /v1/me/devices 201, then 200 with the same id %s)" % device_id)
    PASSED[0] += 1

    # 3. Reads the bell: the sign-in it just made is there (the projector has it within moments).
    bell = Call(generated, "GET", "/v1/me/notifications")

    def bell_entries(client, who, session, step):
        deadline = time.monotonic() + 15
        while True:
            _, answer = bell(client, expected=(200,), step=step)
            entries = dig(answer, "data", what=step)
            mine = [e for e in entries if (e.get("attributes") or {}).get("ids", {}).get("signInId") == session]
            if mine:
                return answer, entries, mine[0]
            if time.monotonic() > deadline:
                raise Failure("%s: no new_sign_in entry for session %s within 15 s: %s" % (step, session, json.dumps(answer)[:1500]))
            time.sleep(0.25)

    step = "the buyer reads the bell"
    answer, entries, entry = bell_entries(buyer, "buyer", buyer_session, step)
    attributes = dig(entry, "attributes", what=step)
    expect(entry.get("type") == "notifications", "%s: an entry's type is %r" % (step, entry.get("type")))
    expect(
        attributes.get("event") == "new_sign_in" and attributes.get("category") == "security",
        "%s: the sign-in's entry is %s/%s, not security/new_sign_in" % (step, attributes.get("category"), attributes.get("event")),
    )
    expect(attributes.get("read") is False, "%s: the new entry is read already" % step)
    expect(bool(attributes.get("title")), "%s: the entry has no title" % step)
    unread = dig(answer, "meta", "unread", what=step)
    expect(isinstance(unread, int) and unread >= 1, "%s: meta.unread is %r" % (step, unread))
    say(
        "ok   the buyer reads the bell (GET /v1/me/notifications 200: %d entries, unread %d, newest-sign-in entry %r)"
        % (len(entries), unread, attributes.get("title"))
    )
    PASSED[0] += 1

    # 4. Starts a thread about the watch with its first message (guide section 6).
    first = "Hello! Is the %s still for sale, and does it come with its box?" % watch
    second = "And would you ship it to Utrecht?"
    step = "the buyer starts a thread"
    start = Call(generated, "POST", "/v1/conversations")
    deadline = time.monotonic() + 15
    while True:
        # The catalogue's watch reaches the threads' read model within moments of its event.
        try:
            _, answer = start(
                buyer,
                body={"data": {"type": "conversations", "attributes": {"watchId": watch, "body": first}}},
                parameters={"Idempotency-Key": str(uuid.uuid4())},
                expected=(201,),
                step=step,
            )
            break
        except Failure as failure:
            if "watch_unavailable" not in str(failure) or time.monotonic() > deadline:
                raise
            time.sleep(0.25)
    thread = dig(answer, "data", what=step)
    conversation = dig(thread, "id", what=step)
    attributes = dig(thread, "attributes", what=step)
    expect(thread.get("type") == "conversations", "%s: data.type is %r" % (step, thread.get("type")))
    for name, value in (("side", "buyer"), ("otherParty", {"type": "shops", "id": shop})):
        expect(attributes.get(name) == value, "%s: %s is %r, not %r" % (step, name, attributes.get(name), value))
    expect(linked(thread, "watchId", "watch", step) == watch, "%s: the thread is not about %s" % (step, watch))
    expect(linked(thread, "shopId", "shop", step) == shop, "%s: the thread is not with %s" % (step, shop))
    expect(dig(attributes, "lastMessage", "body", what=step) == first, "%s: lastMessage is not the first message" % step)
    included = [r for r in answer.get("included", []) if r.get("type") == "messages"]
    expect(
        [r.get("attributes", {}).get("body") for r in included] == [first], "%s: included messages %s" % (step, json.dumps(included)[:800])
    )
    say("ok   the buyer starts a thread about %s (POST /v1/conversations 201, conversation %s)" % (watch, conversation))
    PASSED[0] += 1

    # 5. Writes a second message.
    step = "the buyer writes again"
    _, answer = Call(generated, "POST", "/v1/conversations/{id}/messages")(
        buyer,
        conversation,
        body={"data": {"type": "messages", "attributes": {"body": second}}},
        parameters={"Idempotency-Key": str(uuid.uuid4())},
        expected=(201,),
        step=step,
    )
    message = dig(answer, "data", what=step)
    attributes = dig(message, "attributes", what=step)
    expect(message.get("type") == "messages", "%s: data.type is %r" % (step, message.get("type")))
    for name, value in (("body", second), ("authorSide", "buyer"), ("mine", True)):
        expect(attributes.get(name) == value, "%s: %s is %r, not %r" % (step, name, attributes.get(name), value))
    say("ok   the buyer writes again (POST /v1/conversations/{id}/messages 201, message %s)" % message.get("id"))
    PASSED[0] += 1

    # 6. The shop's member signs in and finds the thread on the seller side.
    member, member_session = sign_in("member", SHOP_SCOPES, "Shop iPad")
    step = "the shop reads its threads"
    _, answer = Call(generated, "GET", "/v1/conversations")(member, parameters={"filter[side]": "seller"}, expected=(200,), step=step)
    threads = [t for t in dig(answer, "data", what=step) if t.get("id") == conversation]
    expect(len(threads) == 1, "%s: the thread %s is not in the seller list once: %s" % (step, conversation, json.dumps(answer)[:1500]))
    attributes = dig(threads[0], "attributes", what=step)
    for name, value in (("side", "seller"), ("unread", True), ("otherParty", {"type": "people", "id": people["buyer"]["id"]})):
        expect(attributes.get(name) == value, "%s: %s is %r, not %r" % (step, name, attributes.get(name), value))
    expect(linked(threads[0], "watchId", "watch", step) == watch, "%s: the thread is not about %s" % (step, watch))
    expect(linked(threads[0], "shopId", "shop", step) == shop, "%s: the thread is not with %s" % (step, shop))
    expect(dig(attributes, "lastMessage", "body", what=step) == second, "%s: lastMessage is not the second message" % step)
    badge = dig(answer, "meta", "unread", what=step)
    expect(isinstance(badge, int) and badge >= 1, "%s: meta.unread is %r" % (step, badge))
    say("ok   the shop's member signs in and finds the thread (GET /v1/conversations?filter[side]=seller 200, unread %d)" % badge)
    PASSED[0] += 1

    step = "the shop reads the messages"
    _, answer = Call(generated, "GET", "/v1/conversations/{id}/messages")(member, conversation, expected=(200,), step=step)
    read = dig(answer, "data", what=step)
    bodies = [dig(m, "attributes", "body", what=step) for m in read]
    expect(bodies == [second, first], "%s: the bodies, newest first, are %r" % (step, bodies))
    for m in read:
        expect(
            m["attributes"].get("authorSide") == "buyer" and m["attributes"].get("mine") is False,
            "%s: message %s is %s/mine=%r" % (step, m.get("id"), m["attributes"].get("authorSide"), m["attributes"].get("mine")),
        )
    say("ok   the shop reads both messages (GET /v1/conversations/{id}/messages 200, newest first)")
    PASSED[0] += 1

    # 7. The bells: the member's holds its own sign-in and nothing of the thread (a buyer's message
    # is the shop's news, pushed, never in the bell; docs/events.md); the buyer's, nothing of their
    # own messages. The member's sign-in comes after the messages in the log, so once the bell has
    # it, it has had the messages too.
    step = "the shop's member reads the bell"
    _, entries, _ = bell_entries(member, "member", member_session, step)
    about = [e for e in entries if (e.get("attributes") or {}).get("ids", {}).get("conversationId") == conversation]
    expect(not about, "%s: the bell has entries about the thread: %s" % (step, json.dumps(about)[:800]))
    _, answer = bell(buyer, expected=(200,), step="the buyer reads the bell again")
    about = [e for e in dig(answer, "data", what=step) if (e.get("attributes") or {}).get("ids", {}).get("conversationId") == conversation]
    expect(not about, "the buyer's bell has entries about their own messages: %s" % json.dumps(about)[:800])
    say("ok   the bells: the member's shows its sign-in and nothing of the thread, the buyer's nothing of their own messages")
    PASSED[0] += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--package", required=True, help="the generated package's name (importable)")
    parser.add_argument("--document", required=True, help="the /openapi.json the client was generated from")
    parser.add_argument("--generator-log", required=True, help="openapi-python-client's output")
    arguments = parser.parse_args()
    try:
        run(arguments)
        failed = 0
    except Failure as failure:
        say("FAIL " + str(failure))
        failed = 1
    except Exception:  # the generated code or the test itself broke: say where
        import traceback

        say("FAIL unexpectedly:\n" + traceback.format_exc())
        failed = 1
    if TYPED:
        say("read from typed models: " + "; ".join(sorted(set(TYPED))))
    if GENERIC:
        say("read from the bytes (the document's generic Document): " + "; ".join(sorted(set(GENERIC))))
    for note in NOTES:
        say("note: " + note)
    say("%d passed, %d failed" % (PASSED[0], failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
