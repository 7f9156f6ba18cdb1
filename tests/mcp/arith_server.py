"""A real MCP server, written with the official Python SDK (PyPI `mcp`), for Specula's tests:
`add` and `multiply`, over stdio (`arith_server.py stdio`) or Streamable HTTP
(`arith_server.py http PORT [KEY]`, at /mcp; with KEY, a request without
`Authorization: Bearer KEY` is refused with 401), or the same over TLS
(`arith_server.py https PORT KEY CERT_PEM KEY_PEM`; make_cert.py makes them)."""
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("arith")


def number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@server.tool()
def add(a: float, b: float) -> str:
    """Add two numbers."""
    return number(a + b)


@server.tool()
def multiply(a: float, b: float) -> str:
    """Multiply two numbers."""
    return number(a * b)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn
        from starlette.responses import PlainTextResponse

        port, key = int(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else None)
        app = server.streamable_http_app()

        async def guarded(scope, receive, send):
            headers = dict(scope.get("headers") or [])
            if key and scope["type"] == "http" and headers.get(b"authorization") != f"Bearer {key}".encode():
                await PlainTextResponse("missing or wrong key", status_code=401)(scope, receive, send)
                return
            await app(scope, receive, send)

        tls = {"ssl_certfile": sys.argv[4], "ssl_keyfile": sys.argv[5]} if sys.argv[1] == "https" else {}
        uvicorn.run(guarded, host="127.0.0.1", port=port, log_level="warning", **tls)
