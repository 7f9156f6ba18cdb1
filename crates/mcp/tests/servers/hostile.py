"""An MCP server over stdio, written by hand (no SDK) to misbehave in one way, named by argv[1]:

silent   never answers anything, not even initialize
hang     answers the handshake and tools/list, never a call
huge     answers a call with one 100 MB message
garbage  answers a call with a line that is not JSON-RPC
exit     exits in the middle of a call, after a word on stderr
exit-once  the same the first time it runs (argv[2]: a file it creates then), then behaves
many     lists 10,000 tools
well     behaves: `echo` returns its `text` argument (the control case)
late     behaves, but answers the handshake after 2 s
"""
import json
import os
import sys
import time

mode = sys.argv[1]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def tool(name):
    return {"name": name, "description": f"The tool {name}",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}


for line in sys.stdin:
    request = json.loads(line)
    method, ident = request.get("method"), request.get("id")
    if ident is None or mode == "silent":
        continue  # notifications need no answer; silent answers nothing
    if method == "initialize":
        if mode == "late":
            time.sleep(2)
        send({"jsonrpc": "2.0", "id": ident, "result": {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}}, "serverInfo": {"name": f"hostile-{mode}", "version": "1"}}})
    elif method == "tools/list":
        tools = [tool(f"tool_{i}") for i in range(10_000)] if mode == "many" else [tool("echo")]
        send({"jsonrpc": "2.0", "id": ident, "result": {"tools": tools}})
    elif method == "tools/call":
        if mode == "hang":
            time.sleep(3600)
        elif mode == "huge":
            sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": {"content": [{"type": "text", "text": "' % json.dumps(ident))
            chunk = "x" * (1 << 20)
            for _ in range(100):
                sys.stdout.write(chunk)
            sys.stdout.write('"}]}}\n')
            sys.stdout.flush()
        elif mode == "garbage":
            sys.stdout.write("{this is not json-rpc\n")
            sys.stdout.flush()
        elif mode == "exit" or (mode == "exit-once" and not os.path.exists(sys.argv[2])):
            if mode == "exit-once":
                open(sys.argv[2], "w").close()
            sys.stderr.write("boom: the server fell over\n")
            sys.stderr.flush()
            sys.exit(3)
        elif mode == "env":
            # What the server was given of its parent's environment, names sorted.
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": " ".join(sorted(os.environ))}]}})
        else:
            text = request["params"].get("arguments", {}).get("text", "")
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": text}]}})
    else:
        send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no method {method}"}})
