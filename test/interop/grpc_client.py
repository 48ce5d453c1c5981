"""Calls the server with Python's gRPC (C-core), the way a grpcio client in another language would.

Reads a JSON list of calls on stdin: {"method": "/pkg.Service/Method", "request": hex, "timeout": seconds
or null, "parallel": n, "stream": bool, "cancel_after": n, "metadata": [[key, value], ...]}; answers a JSON list on stdout, one entry per
call (per repetition when parallel): {"code": name, "message": text, "response": hex or null, "details":
hex or null}, and for server-streaming calls "responses": [hex, ...] (what arrived before the end, a
cancel after `cancel_after` messages included).
Messages are passed as raw bytes (no generated code): the test encodes and decodes them.
"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import grpc


def metadata(spec):
    return [tuple(kv) for kv in spec.get("metadata", [])] or None


def call(channel, spec):
    method = channel.unary_unary(spec["method"])  # no serializers: bytes in, bytes out
    try:
        response, rpc = method.with_call(bytes.fromhex(spec["request"]), timeout=spec.get("timeout"), metadata=metadata(spec))
        return {"code": "OK", "message": "", "response": response.hex(), "details": None}
    except grpc.RpcError as err:
        details = dict(err.trailing_metadata() or ()).get("grpc-status-details-bin")
        return {"code": err.code().name, "message": err.details(), "response": None, "details": details.hex() if details else None}


def stream(channel, spec):
    method = channel.unary_stream(spec["method"])
    responses = []
    calls = method(bytes.fromhex(spec["request"]), timeout=spec.get("timeout"), metadata=metadata(spec))
    try:
        for message in calls:
            responses.append(message.hex())
            if spec.get("cancel_after") and len(responses) >= spec["cancel_after"]:
                calls.cancel()
        return {"code": "OK", "message": "", "response": None, "details": None, "responses": responses}
    except grpc.RpcError as err:
        details = dict(err.trailing_metadata() or ()).get("grpc-status-details-bin")
        return {"code": err.code().name, "message": err.details(), "response": None, "details": details.hex() if details else None, "responses": responses}


def main():
    target, calls = sys.argv[1], json.load(sys.stdin)
    results = []
    with grpc.insecure_channel(target) as channel:
        for spec in calls:
            n = spec.get("parallel", 1)
            if spec.get("stream"):
                results.append(stream(channel, spec))
            elif n == 1:
                results.append(call(channel, spec))
            else:
                with ThreadPoolExecutor(max_workers=n) as pool:
                    results.extend(pool.map(lambda _: call(channel, spec), range(n)))
    json.dump(results, sys.stdout)


main()
