#!/usr/bin/python3
"""`make test-ha`: the tier on two nodes against a PostgreSQL cluster that loses its primary.

Starts Debian's etcd and three PostgreSQL 15 servers under Debian's Patroni on loopback (synchronous
replication), the push mock (Tests/PushMocks) and the SMTP mock (Tests/MailMocks), and two
`inbox run` nodes with a multi-host DATABASE_URL. Under steady traffic (buyers' messages posted with
idempotency keys to both nodes, orders ingested through /internal/v1/events, each making pushes and
a mail) it makes three faults, one after the other:

  switchover   `POST /switchover` to the primary's Patroni: the primary hands over to its sync standby
  crash        `kill -9` of the primary's postmaster; Patroni on that machine decides what follows
  machine      `kill -9` of the primary's Patroni and postmaster together (a lost machine): the
               leader key expires and Patroni promotes the sync standby

and then checks, failing with a sentence for each broken promise:
  - every write the API acknowledged is in the log, once (0 lost, 0 doubled);
  - the API answered only 2xx, or 503 `database_unavailable` with Retry-After, never a 500;
  - every acknowledged write reached its bell, its pushes and its mail; no bell entry doubled;
    pushes and mails sent twice stay within what was in flight (docs/fanout.md, docs/mail.md), and
    every copy of a push carries its first's collapse key;
  - projectors, fan-out and mailer resume by themselves (all read models at the log's head).

It prints the figures (seconds from each fault to the first acknowledged write, the gap's answers)
and writes them as JSON to --report. Exit 0 only when every check passed.
"""

import argparse
import collections
import email
import glob
import http.client as httpclient
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

try:
    import psycopg2
except ImportError:
    sys.stderr.write("failover: python3-psycopg2 is missing (make test-ha installs it)\n")
    sys.exit(3)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG_BIN = None
for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
    if os.path.exists(os.path.join(candidate, "initdb")):
        PG_BIN = candidate
        break

SERVICE_SECRET = "orders-secret-failover-0123456789"
LEASES = 5  # bell, threads, people, preferences; the schedule
PATRONI_TTL, PATRONI_LOOP_WAIT, PATRONI_RETRY_TIMEOUT = 10, 2, 4


def log(message):
    print("[%7.2f] %s" % (time.monotonic() - STARTED, message), flush=True)


STARTED = time.monotonic()


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_user():
    """PostgreSQL refuses root; Patroni runs it as the user it runs as."""
    if os.getuid() != 0:
        return None
    try:
        import pwd
        pwd.getpwnam("postgres")
        return "postgres"
    except KeyError:
        return "nobody"


def http(method, port, path, body=None, headers=None, timeout=10.0):
    """One request on a new connection: (status, headers dict lower-case, body bytes)."""
    connection = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, payload
    finally:
        connection.close()


def wait_until(what, check, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except Exception as error:  # not up yet
            last = error
        time.sleep(interval)
    raise Failure("%s: not within %d s%s" % (what, timeout, " (last: %s)" % last if last else ""))


class Processes:
    def __init__(self):
        self.running = []

    def start(self, name, arguments, log_path, environment=None, user=None):
        if user:
            arguments = ["runuser", "-u", user, "--"] + arguments
        out = open(log_path, "ab")
        process = subprocess.Popen(arguments, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=environment, start_new_session=True)
        process.name = name
        process.log_path = log_path
        self.running.append(process)
        return process

    def stop_all(self):
        for process in reversed(self.running):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for process in self.running:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# ---------------------------------------------------------------------------------------------
# The PostgreSQL cluster: etcd and three Patroni members


class Cluster:
    def __init__(self, folder, processes):
        self.folder = folder
        self.processes = processes
        self.user = server_user()
        self.etcd_port = free_port()
        self.members = []
        for index in range(1, 4):
            self.members.append({
                "name": "pg%d" % index,
                "pg_port": free_port(),
                "rest_port": free_port(),
                "data_dir": os.path.join(folder, "pg%d" % index, "data"),
                "config": os.path.join(folder, "pg%d" % index, "patroni.yml"),
                "log": os.path.join(folder, "pg%d" % index, "patroni.log"),
                "process": None,
            })

    def hosts(self):
        return ",".join("127.0.0.1:%d" % m["pg_port"] for m in self.members)

    def start(self):
        etcd_dir = os.path.join(self.folder, "etcd")
        os.makedirs(etcd_dir)
        peer = free_port()
        client = "http://127.0.0.1:%d" % self.etcd_port
        self.processes.start("etcd", [
            "etcd", "--name", "etcd1", "--data-dir", etcd_dir,
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", "http://127.0.0.1:%d" % peer, "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
            "--initial-cluster", "etcd1=http://127.0.0.1:%d" % peer, "--initial-cluster-state", "new",
        ], os.path.join(self.folder, "etcd.log"))
        wait_until("etcd answering /health", lambda: http("GET", self.etcd_port, "/health")[0] == 200, 30)
        for member in self.members:
            os.makedirs(os.path.dirname(member["data_dir"]))
            with open(member["config"], "w") as f:
                f.write(self.patroni_config(member))
            if self.user:
                subprocess.run(["chown", "-R", self.user, os.path.dirname(member["data_dir"])], check=True)
        for member in self.members:
            self.start_member(member)
        leader = wait_until("a Patroni leader", self.leader, 120, 0.5)
        wait_until("a synchronous standby streaming", self.sync_standby, 120, 0.5)
        # The tier's role and database, on the primary; the standbys replicate them.
        connection = psycopg2.connect(host="127.0.0.1", port=leader["pg_port"], user="postgres", dbname="postgres")
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE ROLE inbox LOGIN")
            cursor.execute("CREATE DATABASE inbox OWNER inbox")
        connection.close()

    def start_member(self, member):
        member["process"] = self.processes.start(member["name"], ["patroni", member["config"]], member["log"], user=self.user)

    def patroni_config(self, member):
        socket_dir = os.path.dirname(member["data_dir"])
        return """scope: inbox-failover
name: {name}
restapi:
  listen: 127.0.0.1:{rest}
  connect_address: 127.0.0.1:{rest}
etcd3:
  hosts: 127.0.0.1:{etcd}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry_timeout}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 300
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        hot_standby: "on"
  initdb:
    - encoding: UTF8
    - locale: C
    - auth: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication replicator 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{port}
  connect_address: 127.0.0.1:{port}
  data_dir: {data}
  bin_dir: {bin}
  pgpass: {socket}/pgpass
  authentication:
    superuser:
      username: postgres
      password: failover
    replication:
      username: replicator
      password: failover
    rewind:
      username: rewinder
      password: failover
  parameters:
    unix_socket_directories: {socket}
    tcp_keepalives_idle: 10
    tcp_keepalives_interval: 5
    tcp_keepalives_count: 3
tags:
  nofailover: false
  noloadbalance: false
""".format(name=member["name"], rest=member["rest_port"], etcd=self.etcd_port, ttl=PATRONI_TTL,
           loop_wait=PATRONI_LOOP_WAIT, retry_timeout=PATRONI_RETRY_TIMEOUT, port=member["pg_port"],
           data=member["data_dir"], bin=PG_BIN, socket=socket_dir)

    def cluster_state(self):
        """Patroni's /cluster from any member that answers."""
        for member in self.members:
            try:
                status, _, body = http("GET", member["rest_port"], "/cluster", timeout=2)
                if status == 200:
                    return json.loads(body)
            except OSError:
                continue
        return None

    def member_named(self, name):
        return next(m for m in self.members if m["name"] == name)

    def leader(self):
        state = self.cluster_state()
        if not state:
            return None
        for row in state.get("members", []):
            if row.get("role") == "leader" and row.get("state") == "running":
                return self.member_named(row["name"])
        return None

    def sync_standby(self):
        state = self.cluster_state()
        if not state:
            return None
        for row in state.get("members", []):
            if row.get("role") == "sync_standby" and row.get("state") in ("running", "streaming"):
                return self.member_named(row["name"])
        return None

    def postmaster_pid(self, member):
        with open(os.path.join(member["data_dir"], "postmaster.pid")) as f:
            return int(f.readline())


# ---------------------------------------------------------------------------------------------
# The tier: the push and SMTP mocks and two `inbox run` nodes


class Tier:
    def __init__(self, folder, processes, binary, cluster):
        self.folder = folder
        self.processes = processes
        self.binary = binary
        self.cluster = cluster
        self.nodes = []

    def start(self):
        push_dir = os.path.join(self.folder, "push")
        os.makedirs(push_dir)
        subprocess.run(["bash", os.path.join(ROOT, "Tests/PushMocks/make_credentials.sh"), push_dir], check=True,
                       stdout=subprocess.DEVNULL)
        ready = os.path.join(push_dir, "ready.json")
        self.processes.start("push-mock", [
            "/usr/bin/python3", os.path.join(ROOT, "Tests/PushMocks/push_mock.py"),
            "--cert", os.path.join(push_dir, "server.pem"), "--key", os.path.join(push_dir, "server-key.pem"),
            "--apns-key-pem", os.path.join(push_dir, "apns-key-public.pem"), "--apns-key-id", "MOCKKEY123",
            "--apns-team-id", "MOCKTEAM12", "--fcm-project", "wristler-mock",
            "--fcm-client-email", "push-mock@wristler-mock.iam.gserviceaccount.com",
            "--fcm-public-key-pem", os.path.join(push_dir, "fcm-key-public.pem"),
            "--ready-file", ready, "--parent-pid", str(os.getpid()),
        ], os.path.join(push_dir, "mock.log"))
        self.push = wait_until("the push mock's ready file", lambda: os.path.exists(ready) and json.load(open(ready)), 30)
        account_path = os.path.join(push_dir, "fcm-service-account.json")
        account = json.load(open(account_path))
        account["token_uri"] = self.push["fcmTokenUri"]
        json.dump(account, open(account_path, "w"))

        self.mail_dir = os.path.join(self.folder, "smtp")
        os.makedirs(self.mail_dir)
        port_file = os.path.join(self.folder, "smtp.port")
        self.processes.start("smtp-mock", [
            "/usr/bin/python3", os.path.join(ROOT, "Tests/MailMocks/smtp_mock.py"),
            "--port-file", port_file, "--folder", self.mail_dir, "--parent-pid", str(os.getpid()),
        ], os.path.join(self.folder, "smtp.log"))
        smtp_port = wait_until("the SMTP mock's port file", lambda: os.path.exists(port_file) and open(port_file).read().strip(), 30)

        secrets_key = os.path.join(self.folder, "secrets.key")
        with open(secrets_key, "w") as f:
            f.write(os.urandom(32).hex())
        self.database_url = "postgres://inbox@%s/inbox?target_session_attrs=read-write&connect_timeout=2" % self.cluster.hosts()
        self.base_environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "DATABASE_URL": self.database_url,
            "INBOX_MIGRATIONS_DIR": os.path.join(ROOT, "sql"),
            "INBOX_LOG_FORMAT": "text",
            "INBOX_SECRETS_KEY_FILE": secrets_key,
            "INBOX_SERVICE_CREDENTIALS": "orders=" + SERVICE_SECRET,
            "INBOX_APNS_KEY_FILE": os.path.join(push_dir, "apns-key.p8"),
            "INBOX_APNS_KEY_ID": "MOCKKEY123",
            "INBOX_APNS_TEAM_ID": "MOCKTEAM12",
            "INBOX_APNS_PRODUCTION_URL": "https://127.0.0.1:%d" % self.push["apnsProduction"],
            "INBOX_APNS_DEVELOPMENT_URL": "https://127.0.0.1:%d" % self.push["apnsDevelopment"],
            "INBOX_FCM_SERVICE_ACCOUNT": account_path,
            "INBOX_FCM_URL": "https://127.0.0.1:%d" % self.push["fcm"],
            "INBOX_PUSH_CA_FILE": os.path.join(push_dir, "ca.pem"),
            "INBOX_PUSH_CLAIM_SECONDS": "10",
            "INBOX_SMTP_URL": "smtp://127.0.0.1:%s" % smtp_port,
            "INBOX_SMTP_ALLOW_PLAIN": "1",
            "INBOX_SMTP_TIMEOUT_SECONDS": "4",
            "INBOX_MAIL_CLAIM_SECONDS": "10",
            "INBOX_MAIL_POLL_SECONDS": "1",
            "INBOX_SCHEDULE_INTERVAL_SECONDS": "10",
            "INBOX_MAIL_FROM": "Wristler <inbox@wristler.test>",
            "INBOX_API_PERSON_LIMIT": "10000/1",
            "INBOX_POLL_INTERVAL_MS": "200",
            "SWIFT_BACKTRACE": "enable=no",
        }
        migrate = subprocess.run([self.binary, "migrate"], env=self.base_environment, capture_output=True, text=True)
        if migrate.returncode != 0:
            raise Failure("inbox migrate failed: %s %s" % (migrate.stdout, migrate.stderr))
        # The API verifies `inbox token`'s development key, kept in the data folder: the same on both.
        self.token_dir = os.path.join(self.folder, "node-a")
        self.token("m0")
        os.makedirs(os.path.join(self.folder, "node-b"))
        shutil.copy(os.path.join(self.token_dir, "dev-token-key.pem"), os.path.join(self.folder, "node-b"))
        for name in ("a", "b"):
            port, ops = free_port(), free_port()
            environment = dict(self.base_environment, INBOX_HTTP_PORT=str(port), INBOX_OPS_PORT=str(ops),
                               INBOX_DATA_DIR=os.path.join(self.folder, "node-" + name))
            process = self.processes.start("inbox-" + name, [self.binary, "run"],
                                           os.path.join(self.folder, "node-%s.log" % name), environment)
            self.nodes.append({"name": name, "port": port, "ops": ops, "process": process})
        for node in self.nodes:
            wait_until("node %s ready" % node["name"], lambda: http("GET", node["ops"], "/readyz", timeout=2)[0] == 200, 90)

    def token(self, person):
        result = subprocess.run([self.binary, "token", "--person", person, "--ttl", "7200",
                                 "--scope", "account:read account:write messages:read messages:write"],
                                env=dict(self.base_environment, INBOX_DATA_DIR=self.token_dir), capture_output=True, text=True)
        if result.returncode != 0:
            raise Failure("inbox token failed: %s" % result.stderr)
        return result.stdout.strip()

    def push_requests(self):
        status, _, body = http("GET", self.push["control"], "/requests", timeout=30)
        return json.loads(body)["requests"]

    def mails(self):
        found = []
        for path in sorted(glob.glob(os.path.join(self.mail_dir, "*.eml"))):
            with open(path, "rb") as f:
                found.append(email.message_from_bytes(f.read()))
        return found


# ---------------------------------------------------------------------------------------------
# Traffic: buyers writing to shops through the API, orders ingested by another tier


class Traffic:
    SHOPS = 6
    BUYERS = 6

    def __init__(self, tier):
        self.tier = tier
        self.lock = threading.Lock()
        self.attempts = []          # every request: kind, node, start, end, status, code, retryAfter, error
        self.acknowledged = []      # writes the API acknowledged: kind, key, id, at
        self.unacknowledged = []    # writes given up on (none expected)
        self.stopping = threading.Event()
        self.order_counter = 0
        self.rotation = 0

    # -- set-up, before any fault
    def prepare(self):
        tier = self.tier
        service = {"Authorization": "Bearer " + SERVICE_SECRET, "Content-Type": "application/vnd.api+json"}
        events = []
        for i in range(1, self.SHOPS + 1):
            events.append(self.event("shop-sh%d" % i, "shop_member_added", {"shopId": "sh%d" % i, "personId": "m%d" % i}))
            events.append(self.event("watch-w%d" % i, "watch_status_changed", {"watchId": "w%d" % i, "shopId": "sh%d" % i, "status": "for_sale"}))
        status, _, body = self.request("a", "POST", "/internal/v1/events", {"data": events}, service)
        if status != 201:
            raise Failure("the set-up events were refused: %d %s" % (status, body[:500]))
        self.tokens = {}
        self.devices = {}
        for person in ["m%d" % i for i in range(1, self.SHOPS + 1)] + ["b%d" % j for j in range(1, self.BUYERS + 1)]:
            self.tokens[person] = tier.token(person)
            contact = {"data": {"type": "contacts", "id": person, "attributes": {"email": "%s@wristler.test" % person, "language": "en"}}}
            status, _, body = self.request("a", "PUT", "/internal/v1/contacts/" + person, contact, service)
            if status not in (200, 201):
                raise Failure("contact %s: %d %s" % (person, status, body[:300]))
            # Shops' people on Android (FCM), buyers on iPhones (APNs).
            platform = "android" if person.startswith("m") else "ios"
            token = ("fcm-%s-" % person) + uuid.uuid4().hex if platform == "android" else os.urandom(32).hex()
            device = {"data": {"type": "devices", "attributes": {"platform": platform, "pushToken": token, "appId": "eu.wristler.app",
                                                                "appVersion": "2.4.0", "locale": "en"}}}
            status, _, body = self.request("a", "POST", "/v1/me/devices", device, self.person_headers(person))
            if status != 201:
                raise Failure("device of %s: %d %s" % (person, status, body[:300]))
            self.devices[person] = token
        # One thread per buyer and shop, started with its first message.
        self.conversations = []
        for j in range(1, self.BUYERS + 1):
            for i in range(1, self.SHOPS + 1):
                start = {"data": {"type": "conversations", "attributes": {"watchId": "w%d" % i, "body": "Is it still available?"}}}
                status, _, body = self.request("a", "POST", "/v1/conversations", start, self.person_headers("b%d" % j))
                if status != 201:
                    raise Failure("conversation b%d/w%d: %d %s" % (j, i, status, body[:300]))
                document = json.loads(body)
                message = next(item["id"] for item in document.get("included", []) if item["type"] == "messages")
                self.conversations.append(("b%d" % j, "sh%d" % i, "m%d" % i, document["data"]["id"]))
                self.acknowledge("message", None, message, shop_member="m%d" % i, buyer="b%d" % j)

    def event(self, stream, type, payload, key=None):
        attributes = {"stream": stream, "eventType": type, "payload": payload, "metadata": {"origin": "api"}}
        if key:
            attributes["idempotencyKey"] = key
        return {"type": "events", "attributes": attributes}

    def person_headers(self, person, key=None):
        headers = {"Authorization": "Bearer " + self.tokens[person], "Content-Type": "application/vnd.api+json",
                   "X-Wristler-App": "ios/2.4.0"}
        if key:
            headers["Idempotency-Key"] = key
        return headers

    def node_port(self, name):
        return next(n["port"] for n in self.tier.nodes if n["name"] == name)

    def request(self, node, method, path, body, headers, kind=None):
        start = time.monotonic()
        row = {"kind": kind, "node": node, "start": start, "status": None, "code": None, "retryAfter": None, "error": None}
        try:
            status, response_headers, payload = http(method, self.node_port(node), path, body, headers, timeout=15)
            row["status"] = status
            row["retryAfter"] = response_headers.get("retry-after")
            if status >= 400:
                try:
                    row["code"] = json.loads(payload)["errors"][0].get("code")
                except Exception:
                    row["code"] = "(not a JSON:API error document)"
            return status, response_headers, payload
        except OSError as error:
            row["error"] = "%s: %s" % (type(error).__name__, error)
            return None, {}, b""
        finally:
            row["end"] = time.monotonic()
            if kind:
                with self.lock:
                    self.attempts.append(row)

    def acknowledge(self, kind, key, identifier, **facts):
        with self.lock:
            self.acknowledged.append(dict(facts, kind=kind, key=key, id=identifier, at=time.monotonic()))

    def next_node(self):
        with self.lock:
            self.rotation += 1
            return "ab"[self.rotation % 2]

    def until_acknowledged(self, kind, send):
        """A client's retry: the same request (same idempotency key) to either node until a 2xx,
        waiting Retry-After after a 503 and a moment after a transport error."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status, headers, payload = send(self.next_node())
            if status is not None and 200 <= status < 300:
                return payload
            if status is not None and status < 500 and status not in (408, 429):
                return None  # refused for good: recorded in attempts, counted as a failure below
            try:
                pause = float(headers.get("retry-after", "0.2"))
            except ValueError:
                pause = 0.2
            time.sleep(min(max(pause, 0.1), 2))
        return None

    def poster(self, seed):
        generator = random.Random(seed)
        while not self.stopping.is_set():
            buyer, shop, member, conversation = generator.choice(self.conversations)
            key = str(uuid.uuid4())
            body = {"data": {"type": "messages", "attributes": {"body": "Would you take a little less? %s" % key[:8]}}}
            payload = self.until_acknowledged("message", lambda node: self.request(
                node, "POST", "/v1/conversations/%s/messages" % conversation, body, self.person_headers(buyer, key), "message"))
            if payload is None:
                with self.lock:
                    self.unacknowledged.append(("message", key))
            else:
                self.acknowledge("message", key, json.loads(payload)["data"]["id"], shop_member=member, buyer=buyer)
            time.sleep(0.05)

    def orders(self, seed):
        generator = random.Random(seed)
        service = {"Authorization": "Bearer " + SERVICE_SECRET, "Content-Type": "application/vnd.api+json"}
        while not self.stopping.is_set():
            with self.lock:
                self.order_counter += 1
                order = "o%d-%d" % (seed, self.order_counter)
            buyer, shop, member, conversation = generator.choice(self.conversations)
            key = "orders:%s:paid" % order
            payload = {"orderId": order, "buyerId": buyer, "shopId": shop, "watchId": "w" + shop[2:],
                       "conversationId": conversation, "amount": {"amount": 425000, "currency": "EUR"}}
            body = {"data": [self.event("order-" + order, "order_paid", payload, key)]}
            answer = self.until_acknowledged("order", lambda node: self.request(node, "POST", "/internal/v1/events", body, service, "order"))
            if answer is None:
                with self.lock:
                    self.unacknowledged.append(("order", key))
            else:
                self.acknowledge("order", key, order, shop_member=member, buyer=buyer)
            time.sleep(0.1)

    def reader(self, seed):
        """People reading their bell and their threads meanwhile: answered, or 503 like the writes."""
        generator = random.Random(seed)
        while not self.stopping.is_set():
            buyer, shop, member, conversation = generator.choice(self.conversations)
            path = generator.choice(["/v1/me/notifications", "/v1/conversations", "/v1/conversations/%s/messages" % conversation])
            self.request(self.next_node(), "GET", path, None, self.person_headers(buyer), "read")
            time.sleep(0.05)

    def start(self):
        self.threads = [threading.Thread(target=self.poster, args=(n,), daemon=True) for n in (1, 2, 3)]
        self.threads += [threading.Thread(target=self.reader, args=(n,), daemon=True) for n in (4,)]
        self.threads += [threading.Thread(target=self.orders, args=(n,), daemon=True) for n in (1,)]
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(150)


# ---------------------------------------------------------------------------------------------
# Faults


def switchover(cluster):
    leader = cluster.leader()
    candidate = cluster.sync_standby()
    status, _, body = http("POST", leader["rest_port"], "/switchover",
                           {"leader": leader["name"], "candidate": candidate["name"]}, {"Content-Type": "application/json"}, timeout=60)
    if status != 200:
        raise Failure("Patroni refused the switchover: %d %s" % (status, body[:300]))
    return leader


def crash(cluster):
    leader = cluster.leader()
    os.kill(cluster.postmaster_pid(leader), signal.SIGKILL)
    return leader


def lose_machine(cluster):
    leader = cluster.leader()
    postmaster = cluster.postmaster_pid(leader)
    os.killpg(leader["process"].pid, signal.SIGKILL)  # Patroni (and runuser), then PostgreSQL at once
    os.kill(postmaster, signal.SIGKILL)
    return leader


FAULTS = [("switchover", switchover), ("crash", crash), ("machine", lose_machine)]


def run_fault(name, action, cluster, traffic, settle):
    before = cluster.leader()
    at = time.monotonic()
    log("fault %s: primary %s" % (name, before["name"]))
    old = action(cluster)
    # Patroni's view: the first moment a running leader is there again (another one, but for a crash,
    # where Patroni may bring the same one back).
    def promoted():
        leader = cluster.leader()
        if leader is None:
            return None
        if name != "crash" and leader["name"] == old["name"]:
            return None
        try:
            with psycopg2.connect(host="127.0.0.1", port=leader["pg_port"], user="postgres", dbname="postgres", connect_timeout=2) as c:
                with c.cursor() as cursor:
                    cursor.execute("SELECT NOT pg_is_in_recovery()")
                    writable = cursor.fetchone()[0]
            c.close()
        except psycopg2.Error:
            return None
        return leader if writable else None
    leader = wait_until("a writable primary after the %s" % name, promoted, 120, 0.1)
    promoted_at = time.monotonic()
    log("fault %s: %s takes writes %.1f s after the fault" % (name, leader["name"], promoted_at - at))
    time.sleep(settle)
    with traffic.lock:
        attempts = [a for a in traffic.attempts if at - 1 <= a["start"] <= promoted_at + settle]
    writes = [a for a in attempts if a["kind"] != "read"]
    succeeded = lambda a: a["status"] is not None and 200 <= a["status"] < 300
    # The gap as a client saw it: from the fault to the first write acknowledged after its first
    # refused one (none refused: no gap).
    first_refused = min((a["start"] for a in writes if a["start"] >= at and not succeeded(a)), default=None)
    recovered = min((a["end"] for a in writes if first_refused is not None and a["start"] >= first_refused and succeeded(a)), default=None)
    after_promotion = min((a["end"] for a in writes if a["start"] >= promoted_at and succeeded(a)), default=None)
    window = [a for a in traffic_acks(traffic) if at - 5 <= a <= promoted_at + settle]
    longest = max((b - a for a, b in zip(window, window[1:])), default=None)
    figures = {
        "fault": name,
        "oldPrimary": old["name"],
        "newPrimary": leader["name"],
        "secondsToWritablePrimary": round(promoted_at - at, 2),
        "secondsToFirstAcknowledgedWrite": 0 if first_refused is None else (round(recovered - at, 2) if recovered else None),
        "secondsFromPromotionToFirstAcknowledgedWrite": round(after_promotion - promoted_at, 2) if after_promotion else None,
        "longestSecondsWithoutAcknowledgedWrite": round(longest, 2) if longest is not None else None,
        "answers": dict(collections.Counter(
            "%s %s" % (a["kind"], (str(a["status"]) + (" " + a["code"] if a["code"] else "")) if a["status"] else "transport error")
            for a in attempts)),
    }
    if name == "machine":
        # The lost machine comes back: its Patroni starts again and rejoins as a replica.
        cluster.start_member(old)
    log("fault %s: %s" % (name, json.dumps(figures)))
    return figures


def traffic_acks(traffic):
    with traffic.lock:
        return sorted(a["at"] for a in traffic.acknowledged)


# ---------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inbox", default=os.path.join(ROOT, ".build/debug/inbox"))
    parser.add_argument("--report", default=None)
    parser.add_argument("--keep", action="store_true", help="keep the folder (logs, data) afterwards")
    parser.add_argument("--settle", type=float, default=12.0, help="seconds of traffic after each fault")
    options = parser.parse_args()
    if PG_BIN is None:
        raise Failure("no PostgreSQL server is installed (make test-ha installs postgresql)")
    for tool in ("patroni", "etcd"):
        if shutil.which(tool) is None:
            raise Failure("%s is not installed (make test-ha installs Debian's patroni and etcd-server)" % tool)
    folder = tempfile.mkdtemp(prefix="inbox-failover.")
    os.chmod(folder, 0o755)
    log("folder %s" % folder)
    processes = Processes()
    ok = False
    try:
        cluster = Cluster(folder, processes)
        cluster.start()
        log("cluster up: primary %s, sync standby %s" % (cluster.leader()["name"], cluster.sync_standby()["name"]))
        tier = Tier(folder, processes, options.inbox, cluster)
        tier.start()
        log("two nodes ready")
        traffic = Traffic(tier)
        traffic.prepare()
        log("set up: %d conversations" % len(traffic.conversations))
        traffic.start()
        time.sleep(8)
        faults = []
        for name, action in FAULTS:
            wait_until("a synchronous standby before the %s" % name, cluster.sync_standby, 120, 0.5)
            faults.append(run_fault(name, action, cluster, traffic, options.settle))
        traffic.stop()
        log("traffic stopped: %d writes acknowledged, %d given up" % (len(traffic.acknowledged), len(traffic.unacknowledged)))
        report = {"faults": faults}
        failures = check(cluster, tier, traffic, report)
        if options.report:
            with open(options.report, "w") as f:
                json.dump(report, f, indent=2)
        print(json.dumps(report, indent=2))
        for failure in failures:
            print("FAILED: " + failure, file=sys.stderr)
        ok = not failures
        return 0 if ok else 1
    finally:
        processes.stop_all()
        if options.keep or not ok:
            log("kept %s" % folder)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def push_key(row):
    """(device token, event, the message or order it is about) of a push the mock received."""
    if row.get("listener") == "fcm" and row.get("path", "").endswith(":send"):
        message = (row.get("body") or {}).get("message", {})
        data = message.get("data", {})
        android = message.get("android", {})
        collapse = (android.get("notification") or {}).get("tag")
        return (message.get("token"), data.get("event"), data.get("messageId") or data.get("orderId")), collapse
    if row.get("listener", "").startswith("apns"):
        data = row.get("body") or {}
        return (row.get("token"), data.get("event"), data.get("messageId") or data.get("orderId")), row.get("headers", {}).get("apns-collapse-id")
    return None, None


def sold_orders(mail):
    """The orders a shop's "sold" mail names, from its plain-text part."""
    for part in mail.walk():
        if part.get_content_type() == "text/plain":
            text = part.get_payload(decode=True).decode("utf-8", "replace")
            return [line.split()[2] for line in text.splitlines() if line.startswith("- Order ") and " paid" in line]
    return []


def check(cluster, tier, traffic, report):
    failures = []
    messages = {a["id"]: a for a in traffic.acknowledged if a["kind"] == "message"}
    orders = {a["id"]: a for a in traffic.acknowledged if a["kind"] == "order"}
    report["acknowledged"] = {"messages": len(messages), "orders": len(orders)}

    # What the API answered, every attempt of every write.
    def acceptable(a):
        if a["status"] is not None and 200 <= a["status"] < 300:
            return True
        return a["status"] == 503 and a["code"] == "database_unavailable" and a["retryAfter"] is not None
    answers = collections.Counter(
        a["kind"] + " " + (str(a["status"]) + (" " + a["code"] if a["code"] else "") + (" Retry-After" if a["retryAfter"] else "")) if a["status"] else a["error"]
        for a in traffic.attempts)
    report["answers"] = dict(answers)
    wrong = [a for a in traffic.attempts if not acceptable(a)]
    if wrong:
        failures.append("%d answers were neither 2xx nor 503 database_unavailable with Retry-After: %s"
                        % (len(wrong), dict(collections.Counter(str(a["status"]) + " " + str(a["code"] or a["error"]) for a in wrong))))
    if traffic.unacknowledged:
        failures.append("%d writes were never acknowledged in two minutes of retries" % len(traffic.unacknowledged))

    # Everything below waits for the roles to catch up on their own: projectors, fan-out, mailer.
    def database():
        leader = cluster.leader()
        connection = psycopg2.connect(host="127.0.0.1", port=leader["pg_port"], user="inbox", dbname="inbox", connect_timeout=3)
        connection.autocommit = True
        return connection

    def at_head():
        with database() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT max(position) FROM events")
            head = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM projection_checkpoints WHERE position < %s", (head,))
            return cursor.fetchone()[0] == 0
    def leases_held():
        # The four projectors' and the schedule's leases are session advisory locks on the primary.
        with database() as connection, connection.cursor() as cursor:
            cursor.execute("SELECT l.classid::bigint, l.objid::bigint, a.application_name FROM pg_locks l"
                           " LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted")
            held = cursor.fetchall()
            if len({(c, o) for c, o, _ in held}) >= LEASES:
                return True
            raise Failure("advisory locks held: %s" % held)
    caught_up_at = time.monotonic()
    for what, done in (("every projection at the log's head", at_head), ("every lease taken again (%d)" % LEASES, leases_held)):
        try:
            wait_until(what, done, 120, 0.5)
        except Failure as failure:
            failures.append(str(failure))

    expected_pushes = set()
    for identifier, ack in messages.items():
        expected_pushes.add((traffic.devices[ack["shop_member"]], "message_received", identifier))
    for identifier, ack in orders.items():
        expected_pushes.add((traffic.devices[ack["shop_member"]], "order_paid", identifier))
        expected_pushes.add((traffic.devices[ack["buyer"]], "order_paid", identifier))
    pushes = collections.Counter()
    collapse_keys = collections.defaultdict(set)

    def pushes_arrived():
        pushes.clear()
        collapse_keys.clear()
        for row in tier.push_requests():
            key, collapse = push_key(row)
            if key is None or not row.get("response") or row["response"].get("status") != 200:
                continue
            pushes[key] += 1
            collapse_keys[key].add(collapse)
        return expected_pushes <= set(pushes)

    sold = collections.Counter()
    message_ids = collections.Counter()

    def mails_arrived():
        sold.clear()
        message_ids.clear()
        for mail in tier.mails():
            message_ids[mail["Message-ID"]] += 1
            for order in sold_orders(mail):
                sold[(mail["To"].split("@")[0], order)] += 1
        return all((ack["shop_member"], order) in sold for order, ack in orders.items())

    for what, arrived in (("every acknowledged write's pushes at the push mock", pushes_arrived),
                          ("every acknowledged order's sold mail at the SMTP relay", mails_arrived)):
        try:
            wait_until(what, arrived, 120, 1)
        except Failure as failure:
            failures.append(str(failure))
    report["secondsToCatchUpAfterTraffic"] = round(time.monotonic() - caught_up_at, 1)

    missing_pushes = expected_pushes - set(pushes)
    if missing_pushes:
        failures.append("%d pushes never arrived, e.g. %s" % (len(missing_pushes), sorted(missing_pushes)[:3]))
    pushes_twice = sum(count - 1 for key, count in pushes.items() if key in expected_pushes)
    other_collapse = [key for key, keys in collapse_keys.items() if len(keys) > 1]
    if other_collapse:
        failures.append("%d pushes sent again with another collapse key than their first" % len(other_collapse))
    missing_mails = [order for order, ack in orders.items() if (ack["shop_member"], order) not in sold]
    if missing_mails:
        failures.append("%d orders' sold mails never arrived, e.g. %s" % (len(missing_mails), missing_mails[:3]))
    mails_twice = sum(count - 1 for count in message_ids.values())
    orders_mailed_twice = sum(count - 1 for count in sold.values())

    with database() as connection, connection.cursor() as cursor:
        cursor.execute("SELECT payload->>'messageId', count(*) FROM events WHERE type = 'message_sent' GROUP BY 1")
        logged_messages = dict(cursor.fetchall())
        cursor.execute("SELECT payload->>'orderId', count(*) FROM events WHERE type = 'order_paid' GROUP BY 1")
        logged_orders = dict(cursor.fetchall())
        cursor.execute("SELECT table_schema FROM information_schema.tables WHERE table_name = 'bell_entries'")
        schemas = [row[0] for row in cursor.fetchall()]
        if len(schemas) != 1:
            raise Failure("expected one bell_entries table, found %s" % schemas)
        cursor.execute('SELECT person_id, ids->>\'orderId\', count(*) FROM "%s".bell_entries WHERE event = \'order_paid\' GROUP BY 1, 2' % schemas[0])
        bell = {(person, order): count for person, order, count in cursor.fetchall()}
        cursor.execute("SELECT name, count FROM push_counters WHERE name LIKE 'reclaimed%%' OR name LIKE 'sent%%'")
        report["pushCounters"] = dict(cursor.fetchall())
        cursor.execute("SELECT name, sum(count)::bigint FROM mail_counters GROUP BY name")
        report["mailCounters"] = dict(cursor.fetchall())
    lost = [m for m in messages if m not in logged_messages] + [o for o in orders if o not in logged_orders]
    doubled = [k for k, c in list(logged_messages.items()) + list(logged_orders.items()) if c > 1]
    if lost:
        failures.append("%d acknowledged writes are not in the log, e.g. %s" % (len(lost), lost[:3]))
    if doubled:
        failures.append("%d writes are in the log more than once, e.g. %s" % (len(doubled), doubled[:3]))
    bell_missing = [o for o, ack in orders.items() if bell.get((ack["buyer"], o), 0) == 0]
    bell_twice = [key for key, count in bell.items() if count > 1]
    if bell_missing:
        failures.append("%d orders have no bell entry for their buyer, e.g. %s" % (len(bell_missing), bell_missing[:3]))
    if bell_twice:
        failures.append("%d bell entries doubled, e.g. %s" % (len(bell_twice), bell_twice[:3]))
    report["log"] = {"lost": len(lost), "doubled": len(doubled)}
    report["bell"] = {"entries": sum(bell.values()), "missing": len(bell_missing), "doubled": len(bell_twice)}
    report["pushes"] = {"expected": len(expected_pushes), "received": sum(pushes.values()), "missing": len(missing_pushes),
                        "sentTwice": pushes_twice, "anotherCollapseKey": len(other_collapse)}
    report["mails"] = {"received": sum(message_ids.values()), "sameMessageIdTwice": mails_twice,
                       "ordersMailedTwice": orders_mailed_twice, "missingSoldMails": len(missing_mails)}
    # The bounds docs/fanout.md and docs/mail.md state: a push or mail goes twice only when it was on
    # its way while the database went away (answers recorded as they arrive, one mail per claim).
    faults = len(report["faults"])
    if pushes_twice > 40 * faults:
        failures.append("%d pushes sent twice: more than the 40 per fault that can be in flight" % pushes_twice)
    if mails_twice > 10 * faults or orders_mailed_twice > 10 * faults:
        failures.append("%d mails sent twice (%d orders in two mails): more than 10 per fault" % (mails_twice, orders_mailed_twice))
    return failures


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as failure:
        print("failover: %s" % failure, file=sys.stderr)
        sys.exit(1)
