"""A small web app for Brewlet's main job. Its image holds only /app: the interpreter, the
standard library and the account it runs as come from the node's runtime, and every answer
says which runtime build served it. Only the sockets of CPython's minimal standard library
are used (the local runtime ships no http package)."""

import os
import signal
import socket
import sys


def runtime_release():
    try:
        with open("/etc/brewlet-runtime-release") as f:
            return f.read().strip()
    except OSError as e:
        return "unknown (%s)" % e.strerror


def answer(path):
    if path == "/healthz":
        return "ok\n"
    return (
        "hello from %s\n"
        "runtime: %s\n"
        "python: %s (%s)\n"
        "uid: %d gid: %d\n"
        "app files: %s\n"
        % (
            socket.gethostname(),
            runtime_release(),
            sys.version.split()[0],
            sys.executable,
            os.getuid(),
            os.getgid(),
            " ".join(sorted(os.listdir("/app"))),
        )
    )


def serve(port):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(64)
    print("listening on :%d, runtime %s" % (port, runtime_release()), flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(5)
            try:
                request = conn.recv(8192).decode("latin-1")
            except OSError:
                continue
            parts = request.split(" ", 2)
            path = parts[1] if len(parts) > 2 else "/"
            status = "200 OK"
            try:
                body = answer(path).encode()
            except Exception as e:  # one bad request never stops the server
                status, body = "500 Internal Server Error", ("error: %r\n" % e).encode()
            head = "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % (status, len(body))
            try:
                conn.sendall(head.encode() + body)
            except OSError:
                pass


if __name__ == "__main__":
    # As PID 1 of its container the process would ignore SIGTERM: stop at once instead.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(int(os.environ.get("PORT", "8080")))
