#!/usr/bin/python3
"""An SMTP relay for the Mail tests, on Debian's python3-aiosmtpd.

Listens on 127.0.0.1 (--port, 0: a free one) and writes the port to --port-file once it accepts
connections. Modes:
  plain                       no TLS at all (EHLO offers no STARTTLS)
  --cert/--key                STARTTLS offered and required before MAIL
  --cert/--key --smtps        TLS from the first byte (SMTPS)
  --user/--password           AUTH LOGIN and PLAIN required (only over TLS)
Answers by recipient: an address starting with "temp" gets 451 4.3.0, "perm" gets 550 5.1.1.
Every accepted message is written to --folder as NNNN.eml (the bytes as received) with
NNNN.json beside it: {"mail_from", "rcpt_tos", "tls", "auth", "peer"}.
Stops when --stop-file appears or the --parent-pid process is gone (a test runner that died).
"""

import argparse
import json
import os
import socket
import ssl
import sys
import threading
import time

try:
    from aiosmtpd.controller import Controller
    from aiosmtpd.smtp import AuthResult, LoginPassword
except ImportError:
    print("python3-aiosmtpd is not installed: run `make test` or `apt-get install -y python3-aiosmtpd`", file=sys.stderr)
    sys.exit(3)


class Recorder:
    def __init__(self, folder):
        self.folder = folder
        self.count = 0
        self.lock = threading.Lock()

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        local = address.lower()
        if local.startswith("temp"):
            return "451 4.3.0 try later"
        if local.startswith("perm"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        with self.lock:
            self.count += 1
            number = self.count
        base = os.path.join(self.folder, "%04d" % number)
        with open(base + ".eml.tmp", "wb") as f:
            f.write(envelope.original_content)
        with open(base + ".json.tmp", "w") as f:
            json.dump({
                "mail_from": envelope.mail_from,
                "rcpt_tos": envelope.rcpt_tos,
                # session.ssl is set by STARTTLS only; implicit TLS shows on the transport.
                "tls": session.ssl is not None or server.transport.get_extra_info("ssl_object") is not None,
                "auth": session.authenticated,
                # The client's address and port: two mails with the same one came over one connection.
                "peer": "%s:%s" % tuple(session.peer[:2]),
            }, f)
        os.rename(base + ".json.tmp", base + ".json")
        os.rename(base + ".eml.tmp", base + ".eml")
        return "250 2.0.0 accepted as %04d" % number


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", required=True)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--smtps", action="store_true")
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--stop-file")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args()
    os.makedirs(args.folder, exist_ok=True)

    context = None
    if args.cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)

    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = (isinstance(auth_data, LoginPassword)
              and auth_data.login == args.user.encode()
              and auth_data.password == args.password.encode())
        # handled=False: aiosmtpd answers 535 itself (handled=True would leave the client waiting).
        return AuthResult(success=ok, handled=False)

    parameters = {"ident": "wristler smtp mock"}
    if context and not args.smtps:
        parameters.update(tls_context=context, require_starttls=True)
    if args.user:
        # aiosmtpd counts only STARTTLS as TLS for AUTH; under SMTPS the whole session is TLS.
        parameters.update(authenticator=authenticate, auth_required=True, auth_require_tls=not args.smtps)

    port = args.port or free_port()
    controller = Controller(
        Recorder(args.folder), hostname="127.0.0.1", port=port,
        ssl_context=context if args.smtps else None,
        server_hostname="localhost" if args.smtps else None,
        **parameters)
    controller.start()
    with open(args.port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.rename(args.port_file + ".tmp", args.port_file)
    print("listening on 127.0.0.1:%d" % port, flush=True)
    try:
        while True:
            if args.stop_file and os.path.exists(args.stop_file):
                break
            if args.parent_pid:
                try:
                    os.kill(args.parent_pid, 0)
                except ProcessLookupError:
                    break
            time.sleep(0.05)
    finally:
        controller.stop()
    print("stopped", flush=True)


if __name__ == "__main__":
    main()
