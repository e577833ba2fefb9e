"""Schemathesis hooks (loaded through SCHEMATHESIS_HOOKS by
test_schemathesis.py): the newline-delimited JSON that bundles travel in.

Requests: `POST /v1/bundles/verify` takes a bundle's lines as
`application/x-ndjson`; generated strings are sent as they are (most are not
bundles, and must get a verdict or a clean 4xx). Responses: `GET /v1/export`
answers `application/x-ndjson`; each line is parsed so that the response
checks see JSON values.
"""
import json

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson_request(ctx, value):
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, list):
        return "".join(json.dumps(item) + "\n" for item in value).encode()
    return (json.dumps(value) + "\n").encode()


@schemathesis.deserializer("application/x-ndjson")
def ndjson_response(ctx, response):
    return [json.loads(line) for line in response.content.splitlines() if line.strip()]
