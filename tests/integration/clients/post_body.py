"""post_body.py - Python's urllib sends one request body over and over, the
way an ordinary client does: write the whole body, then read the answer.
For test_payload_too_large.py.

    python3 post_body.py PORT METHOD PATH BODY_FILE ATTEMPTS

One fresh connection per attempt, no proxy, one after another; one JSON
line per attempt on stdout: {"attempt", "status", "content_type",
"www_authenticate", "body"}
or {"attempt", "error"} when no answer was read.
"""

import http.client
import json
import sys
import urllib.error
import urllib.request


def attempt(opener, url, method, body):
    req = urllib.request.Request(url, data=body, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with opener.open(req, timeout=30) as resp:
            status, headers, raw = resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as e:  # 4xx/5xx: an answer all the same
        status, headers, raw = e.code, e.headers, e.read()
    except (OSError, http.client.HTTPException) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return {"status": status, "content_type": headers.get("Content-Type"),
            "www_authenticate": headers.get("WWW-Authenticate"),
            "body": raw.decode("utf-8", "replace")}


def main():
    port, method, path, file, attempts = sys.argv[1:]
    with open(file, "rb") as f:
        body = f.read()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    url = f"http://127.0.0.1:{port}{path}"
    for i in range(int(attempts)):
        print(json.dumps(dict(attempt=i, **attempt(opener, url, method, body))), flush=True)


if __name__ == "__main__":
    main()
