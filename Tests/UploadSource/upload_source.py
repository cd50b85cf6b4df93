# A local source for the sourceUrl tests (Tests/InboxAPITests/UploadRoutesTests.swift): writes its
# port to the file named by its first argument, then serves until it is killed or the process
# whose id is its second argument (the test runner) is gone. The runner may have blocked signals
# in the thread that started this one (its signal watcher), and a child inherits that mask, so
# it is cleared first; a pipe on stdin would not do as a lifeline either, since other children
# started meanwhile inherit its other end.
# Paths: /photo.png (a PNG sent as text/plain), /page.html, /missing (404), /huge (declares
# 1 GB), /endless (no length, never ends), /slow (a byte a second), /loop (redirects to itself),
# /to?url=... (302 to url), /empty (200, no bytes), /seen?path=/slow (how many requests for a
# path have started).
import base64, os, signal, sys, threading, time, urllib.parse
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")

SEEN = {}
SEEN_LOCK = threading.Lock()

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def send(self, status, body, content_type="application/octet-stream", length=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        with SEEN_LOCK:
            SEEN[url.path] = SEEN.get(url.path, 0) + 1
        try:
            if url.path == "/seen":
                with SEEN_LOCK:
                    count = SEEN.get(urllib.parse.parse_qs(url.query)["path"][0], 0)
                self.send(200, str(count).encode(), "text/plain")
            elif url.path == "/photo.png":
                self.send(200, PNG, "text/plain")
            elif url.path == "/page.html":
                self.send(200, b"<!doctype html><html><body>hello</body></html>", "image/png")
            elif url.path == "/empty":
                self.send(200, b"", "image/png")
            elif url.path == "/huge":
                self.send(200, PNG, "image/png", length=1 << 30)
                time.sleep(5)
            elif url.path == "/endless":
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.end_headers()
                self.wfile.write(PNG)
                chunk = b"\0" * 65536
                for _ in range(1000):
                    self.wfile.write(chunk)
            elif url.path == "/slow":
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(PNG)))
                self.end_headers()
                for byte in PNG:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(1)
            elif url.path == "/loop":
                self.send_response(302)
                self.send_header("Location", "/loop")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif url.path == "/to":
                target = urllib.parse.parse_qs(url.query)["url"][0]
                self.send_response(302)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()
            else:
                self.send(404, b"not here", "text/plain")
        except (BrokenPipeError, ConnectionResetError):
            pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
signal.pthread_sigmask(signal.SIG_SETMASK, [])
signal.signal(signal.SIGTERM, signal.SIG_DFL)

def watch_parent():
    parent = int(sys.argv[2])
    while True:
        try:
            os.kill(parent, 0)
        except OSError:
            os._exit(0)
        time.sleep(0.5)

threading.Thread(target=watch_parent, daemon=True).start()
with open(sys.argv[1] + ".tmp", "w") as ready:
    ready.write(str(server.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
