"""Trust round 6 (issue 77) for the framework classes' HTTP client: user-info in the URL is
a credential (masked in every error and repr), each attempt is bounded by ``timeout`` in
all even against a server that trickles its answer, and the constructor refuses what
``invoke`` would refuse. Servers are raw sockets on 127.0.0.1 in a thread."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tttembed.core.errors import BackendError, ConfigError

lc = pytest.importorskip("tttembed.integrations.langchain")
li = pytest.importorskip("tttembed.integrations.llamaindex")

SECRET = "S3CRET-pw"


@contextmanager
def answering(head: bytes, body: bytes, gap: float = 0.0) -> Iterator[dict]:
    """A server on 127.0.0.1 that answers each request with ``head`` at once, then
    ``body`` one byte every ``gap`` seconds (at once when 0); yields its ``port`` and
    what it saw (``hung_up``: the client closed before the body was sent whole)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    seen = {"port": sock.getsockname()[1], "hung_up": 0, "finished": 0}
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536) or b"\r\n\r\n"
            try:
                conn.sendall(head)
                for i in range(len(body)):
                    if gap and stop.wait(gap):
                        return
                    conn.sendall(body[i:i + 1] if gap else body[i:])
                    if not gap:
                        break
                seen["finished"] += 1
            except OSError:
                seen["hung_up"] += 1

    def accept() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn = sock.accept()[0]
            except OSError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(5)
        sock.close()


def trickling(n: int) -> tuple[bytes, bytes]:
    """The head and body of a 200 whose JSON body is ``n`` bytes (spaces, then ``{}``)."""
    body = b" " * (n - 2) + b"{}"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(n).encode() + b"\r\n\r\n"), body


@pytest.mark.parametrize("call", ["sync", "async"])
def test_a_server_that_trickles_its_answer_is_cut_at_the_attempts_timeout(call):
    """headers, then one byte every 0.5 s of a 24-byte body (12 s): with timeout=1 and
    max_retries=0 the attempt ends as 'timed out after 1 s' and the client hangs up long
    before the body is sent (it was held until the last byte: httpx bounds each read)."""
    head, body = trickling(24)
    with answering(head, body, gap=0.5) as seen:
        retriever = lc.TTTEmbedRetriever(url=f"http://127.0.0.1:{seen['port']}",
                                         timeout=1, max_retries=0)
        with pytest.raises(BackendError) as err:
            if call == "sync":
                retriever.invoke("q")
            else:
                asyncio.run(retriever.ainvoke("q"))
        assert "failed after 1 attempt: timed out after 1 s" in str(err.value), err.value
        assert seen["finished"] == 0, seen  # the whole body was never waited for


@pytest.mark.parametrize("url", [f"http://user:{SECRET}@127.0.0.1:PORT",
                                 f"http://{SECRET}@127.0.0.1:PORT"],
                         ids=["user-password", "lone-user"])
def test_user_info_in_the_url_is_masked_in_errors_and_reprs(url):
    """The password of http://user:SECRET@host (or a lone user name, a token) appears in
    no error (connection refused, HTTP 404, HTTP 503 retried, malformed JSON) and no
    repr of the framework classes; the host and the masked user part do."""
    messages = []
    for head, body in [(b"HTTP/1.1 404 Not Found\r\nContent-Length: 7\r\n\r\n", b"no such"),
                       (b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\n", b"busy"),
                       (b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n", b"nope")]:
        with answering(head, body) as seen:
            there = url.replace("PORT", str(seen["port"]))
            with pytest.raises(BackendError) as err:
                lc.TTTEmbedRetriever(url=there, max_retries=0).invoke("q")
            messages.append(str(err.value))
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    there = url.replace("PORT", str(port))
    for make in (lambda: lc.TTTEmbedRetriever(url=there, max_retries=0).invoke("q"),
                 lambda: asyncio.run(lc.TTTEmbedChainRetriever(url=there, max_retries=0)
                                     .ainvoke("q")),
                 lambda: li.TTTEmbedEmbedding(url=there, max_retries=0)
                 .get_text_embedding("q")):
        with pytest.raises(BackendError) as err:
            make()
        messages.append(str(err.value))
    for obj in (lc.TTTEmbedRetriever(url=there), lc.TTTEmbedChainRetriever(url=there),
                lc.TTTEmbedEmbeddings(url=there), li.TTTEmbedEmbedding(url=there),
                lc.TTTEmbedRetriever(url=there)._client):
        messages += [repr(obj), str(obj)]
    with pytest.raises(ConfigError) as err:
        lc.TTTEmbedRetriever(url=there.replace("http", "ftp"))
    messages.append(str(err.value))
    leaked = [m for m in messages if SECRET in m]
    assert not leaked, leaked
    assert all("***@127.0.0.1" in m for m in messages[:6]), messages[:6]


@pytest.mark.parametrize("make", [
    lambda: lc.TTTEmbedRetriever(url="http://127.0.0.1:1", k="3"),
    lambda: lc.TTTEmbedRetriever(url="http://127.0.0.1:1", k=True),
    lambda: lc.TTTEmbedChainRetriever(url="http://127.0.0.1:1", k=True),
    lambda: lc.TTTEmbedRetriever(url="http://127.0.0.1:1", timeout=float("inf")),
    lambda: lc.TTTEmbedRetriever(url="http://127.0.0.1:1", timeout=float("nan")),
    lambda: lc.TTTEmbedEmbeddings(url="http://127.0.0.1:1", timeout=float("inf")),
    lambda: lc.TTTEmbedRetriever(url="http://127.0.0.1:1", max_retries=True),
    lambda: li.TTTEmbedRetriever("http://127.0.0.1:1", timeout=float("inf")),
    lambda: li.TTTEmbedEmbedding(url="http://127.0.0.1:1", timeout=float("inf")),
], ids=["k-str", "k-bool", "chain-k-bool", "timeout-inf", "timeout-nan",
        "embeddings-timeout-inf", "retries-bool", "li-timeout-inf", "li-embedding-inf"])
def test_the_constructor_refuses_what_invoke_would_refuse(make):
    """k='3' / k=True (invoke refuses them; the constructor coerced them to 3 / 1) and a
    timeout of inf or nan (invoke failed with OverflowError) are ConfigErrors at once,
    naming the class and the parameter."""
    with pytest.raises(ConfigError, match=r"TTTEmbed\w+(\(timeout=...\) must be a finite|"
                                          r": k must be an integer|\(max_retries=...\))"):
        make()
