#!/usr/bin/python3
"""An h2c server (HTTP/2 without TLS, prior knowledge) that misbehaves on request, for the HTTP/2
client's tests (Tests/HTTP2ClientTests/HTTP2ClientEngineTests.swift). Debian's python3-h2.

Prints its port on one line when ready; ends when its standard input closes.
Every answer carries `x-connection: N` (the server's count of connections, from 1).

  /echo                 200 with the request's body
  /hold/...             on connection 1 only: held until --hold requests have arrived, then
                        GOAWAY(NO_ERROR, last_stream_id = the --answer'th held stream), those up to
                        it answered 200, the rest never (the client must send them again); the
                        connection closes 0.3 s later. On later connections: 200 at once.
  /refuse-once/TAG      the first time for TAG: RST_STREAM(REFUSED_STREAM); later: 200
  /silent               never answered
  /big-headers          200 with 20 headers of 4,000 bytes each (80 KB)
"""

import argparse
import asyncio
import os
import sys
import threading

try:
    import h2.config
    import h2.connection
    import h2.events
    from h2.errors import ErrorCodes
    from hyperframe.frame import GoAwayFrame
except ImportError as missing:
    sys.stderr.write("h2_behaviour_server: %s; apt-get install python3-h2\n" % missing)
    sys.exit(3)

arguments = argparse.ArgumentParser()
arguments.add_argument("--hold", type=int, default=10)
arguments.add_argument("--answer", type=int, default=4)
options = arguments.parse_args()

connections = 0
refused_tags = set()


class Server(asyncio.Protocol):
    def connection_made(self, transport):
        global connections
        connections += 1
        self.number = connections
        self.transport = transport
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.h2.initiate_connection()
        self.transport.write(self.h2.data_to_send())
        self.requests = {}
        self.held = []

    def data_received(self, data):
        try:
            events = self.h2.receive_data(data)
        except Exception as error:  # a protocol error: report and drop the connection
            sys.stderr.write("h2_behaviour_server: %r\n" % error)
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self.requests[event.stream_id] = [dict(event.headers), b""]  # answered at StreamEnded
            elif isinstance(event, h2.events.DataReceived):
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                if event.stream_id in self.requests:
                    self.requests[event.stream_id][1] += event.data
            elif isinstance(event, h2.events.StreamEnded):
                self.request(event.stream_id)
        self.transport.write(self.h2.data_to_send())

    def answer(self, stream_id, body=b"", extra=()):
        headers = [(b":status", b"200"), (b"x-connection", str(self.number).encode()),
                   (b"content-length", str(len(body)).encode())] + list(extra)
        self.h2.send_headers(stream_id, headers, end_stream=not body)
        if body:
            self.h2.send_data(stream_id, body, end_stream=True)

    def request(self, stream_id):
        if stream_id not in self.requests:
            return
        headers, body = self.requests.pop(stream_id)
        path = headers.get(b":path", b"/").decode()
        if path == "/echo":
            self.answer(stream_id, body)
        elif path.startswith("/hold/"):
            if self.number != 1:
                self.answer(stream_id, body)
                return
            self.held.append((stream_id, body))
            if len(self.held) == options.hold:
                last = self.held[options.answer - 1][0]
                frame = GoAwayFrame(0)
                frame.last_stream_id = last
                frame.error_code = 0
                self.transport.write(self.h2.data_to_send() + frame.serialize())
                for held_id, held_body in self.held[:options.answer]:
                    self.answer(held_id, held_body)
                asyncio.get_running_loop().call_later(0.3, self.transport.close)
        elif path.startswith("/refuse-once/"):
            if path in refused_tags:
                self.answer(stream_id, body)
            else:
                refused_tags.add(path)
                self.h2.reset_stream(stream_id, error_code=ErrorCodes.REFUSED_STREAM)
        elif path == "/silent":
            pass
        elif path == "/big-headers":
            self.answer(stream_id, b"", [(b"x-big-%d" % index, b"x" * 4000) for index in range(20)])
        else:
            self.h2.send_headers(stream_id, [(b":status", b"404"), (b"content-length", b"0")], end_stream=True)


async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Server, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)

    def watch_stdin():
        sys.stdin.buffer.read()
        os._exit(0)

    threading.Thread(target=watch_stdin, daemon=True).start()
    await server.serve_forever()


asyncio.run(main())
