# A local source for the sourceUrl tests (Tests/InboxAPITests/UploadRoutesTests.swift): writes its
# port to the file named by its argument, then serves until its stdin closes (the test ends).
# Paths: /photo.png (a PNG sent as text/plain), /page.html, /missing (404), /huge (declares
# 1 GB), /endless (no length, never ends), /slow (a byte a second), /loop (redirects to itself),
# /to?url=... (302 to url), /empty (200, no bytes).
import base64, os, sys, threading, time, urllib.parse
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")

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
        try:
            if url.path == "/photo.png":
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
def watch_parent():
    sys.stdin.read()
    os._exit(0)

threading.Thread(target=watch_parent, daemon=True).start()
with open(sys.argv[1] + ".tmp", "w") as ready:
    ready.write(str(server.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
