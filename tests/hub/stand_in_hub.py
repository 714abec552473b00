#!/usr/bin/env python3
"""A stand-in for the Hugging Face Hub's HTTP API, as `huggingface_hub` and
`hf-hub` use it, serving repositories from a directory (standard library only).

    python3 stand_in_hub.py --root DIR [--port 0] [--log FILE]
        [--gated ORG/NAME --token TOKEN] [--drop-after BYTES] [--corrupt]

DIR/ORG/NAME/... are the repositories' files; each repository has one commit,
`main`, whose id hashes its files. It answers:

- GET /api/models/ORG/NAME[/revision/REV]: the model info (`sha`, `siblings`);
- GET /api/models/ORG/NAME/tree/REV[/PATH]?recursive=..: the file tree with
  git blob ids and LFS sha256s (what `snapshot_download` lists);
- HEAD/GET /ORG/NAME/resolve/REV/PATH: a small file itself (ETag: its git blob
  id, X-Repo-Commit), or for a large one (safetensors, GGUF, .bin, .mllm) a 302
  to /cdn/SHA256 (on `localhost`, as the CDN is another host) with X-Linked-Etag, X-Linked-Size and X-Repo-Commit, as the
  Hub redirects weights to its CDN;
- HEAD/GET /cdn/SHA256: the bytes, with `Range: bytes=A-[B]` answered 206.

Errors are the Hub's: a missing repository is 401 (X-Error-Code: RepoNotFound:
the Hub does not tell missing from private), a missing revision 404
RevisionNotFound, a missing file 404 EntryNotFound; a --gated repository's
files need `Authorization: Bearer TOKEN` (401 without a token, 403 with another).

--drop-after BYTES: the first full GET of each /cdn blob sends its headers and
BYTES bytes, then closes the connection (a download cut off). --corrupt: every
/cdn body has its last byte changed (a download damaged on the way). Every
request is
logged to --log as a JSON line: method, path, range, status, bytes sent.

The first line on standard output is `listening on http://127.0.0.1:PORT`.
"""

import argparse
import hashlib
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_EXTENSIONS = (".safetensors", ".gguf", ".bin", ".mllm", ".pt")


class Repo:
    def __init__(self, root, repo_id):
        self.id = repo_id
        self.dir = os.path.join(root, repo_id)
        self.files = {}  # path -> (git blob id, sha256, size)
        for base, _, names in os.walk(self.dir, followlinks=True):
            for name in names:
                full = os.path.join(base, name)
                rel = os.path.relpath(full, self.dir).replace(os.sep, "/")
                with open(full, "rb") as f:
                    data = f.read()
                git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                self.files[rel] = (git, hashlib.sha256(data).hexdigest(), len(data))
        listing = "".join(f"{p}\n{v[0]}\n" for p, v in sorted(self.files.items()))
        self.sha = hashlib.sha1(listing.encode()).hexdigest()

    def path(self, rel):
        return os.path.join(self.dir, rel)


class Hub:
    def __init__(self, args):
        self.root = args.root
        self.gated = set(args.gated or [])
        self.token = args.token
        self.drop_after = args.drop_after
        self.corrupt = args.corrupt
        self.dropped = set()
        self.lock = threading.Lock()
        self.log = open(args.log, "a", buffering=1) if args.log else None
        self.repos = {}
        self.blobs = {}  # sha256 -> file path
        for org in sorted(os.listdir(self.root)):
            if not os.path.isdir(os.path.join(self.root, org)):
                continue
            for name in sorted(os.listdir(os.path.join(self.root, org))):
                repo = Repo(self.root, f"{org}/{name}")
                self.repos[repo.id] = repo
                for rel, (_, sha256, _) in repo.files.items():
                    self.blobs[sha256] = repo.path(rel)

    def record(self, entry):
        if self.log:
            with self.lock:
                self.log.write(json.dumps(entry) + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: Hub = None

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.route(head=True)

    def do_GET(self):
        self.route(head=False)

    # --- answering -------------------------------------------------------
    def answer(self, status, headers=None, body=b"", head=False, sent_limit=None):
        self.close_connection = True
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        if not head:
            out = body if sent_limit is None else body[:sent_limit]
            self.wfile.write(out)
            self.wfile.flush()
            sent = len(out)
        self.hub.record({
            "method": self.command,
            "path": self.path,
            "range": self.headers.get("Range"),
            "auth": self.headers.get("Authorization") is not None,
            "status": status,
            "bytes": sent,
        })

    def error(self, status, code, message, head):
        body = json.dumps({"error": message}).encode()
        self.answer(status, {"X-Error-Code": code, "X-Error-Message": message,
                             "Content-Type": "application/json"}, body, head)

    def json(self, value, head):
        self.answer(200, {"Content-Type": "application/json"}, json.dumps(value).encode(), head)

    # --- routes ----------------------------------------------------------
    def route(self, head):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self.api(parts[2:], urllib.parse.parse_qs(url.query), head)
        if len(parts) >= 2 and parts[0] == "cdn":
            return self.cdn(parts[1], head)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]), head)
        self.error(404, "NotFound", f"no route for {url.path}", head)

    def find(self, repo_id, revision, head):
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            self.error(401, "RepoNotFound", f"Repository Not Found for url: {self.path}.", head)
            return None
        if revision not in ("main", repo.sha):
            self.error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            return None
        return repo

    def api(self, parts, query, head):
        repo_id = "/".join(parts[:2])
        rest = parts[2:]
        revision = rest[1] if len(rest) >= 2 else "main"
        repo = self.find(repo_id, revision, head)
        if repo is None:
            return
        if not rest or rest[0] == "revision":
            return self.json({
                "_id": repo.sha[:24], "id": repo.id, "modelId": repo.id, "sha": repo.sha,
                "private": False, "disabled": False, "downloads": 0, "likes": 0, "tags": [],
                "gated": "manual" if repo.id in self.hub.gated else False,
                "lastModified": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in sorted(repo.files)],
            }, head)
        if rest[0] == "tree":
            under = "/".join(rest[2:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries, folders = [], set()
            for path in sorted(repo.files):
                if under and not path.startswith(under + "/"):
                    continue
                tail = path[len(under) + 1:] if under else path
                if "/" in tail:
                    folder = (under + "/" if under else "") + tail.split("/")[0]
                    if folder not in folders:
                        folders.add(folder)
                        entries.append({"type": "directory", "oid": "0" * 40, "size": 0,
                                        "path": folder})
                    if not recursive:
                        continue
                git, sha256, size = repo.files[path]
                entry = {"type": "file", "oid": git, "size": size, "path": path}
                if path.endswith(LFS_EXTENSIONS):
                    entry["lfs"] = {"oid": sha256, "size": size, "pointerSize": 134}
                entries.append(entry)
            return self.json(entries, head)
        self.error(404, "NotFound", f"no API route {self.path}", head)

    def authorised(self, repo, head):
        if repo.id not in self.hub.gated:
            return True
        given = self.headers.get("Authorization")
        if given is None:
            self.error(401, "GatedRepo", f"Access to model {repo.id} is restricted. You must have access to it and be authenticated to access it. Please log in.", head)
            return False
        if given != f"Bearer {self.hub.token}":
            self.error(403, "GatedRepo", f"Access to model {repo.id} is restricted and you are not in the authorized list.", head)
            return False
        return True

    def resolve(self, repo_id, revision, path, head):
        repo = self.find(repo_id, revision, head)
        if repo is None or not self.authorised(repo, head):
            return
        if path not in repo.files:
            return self.error(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"", head)
        git, sha256, size = repo.files[path]
        if path.endswith(LFS_EXTENSIONS):
            # The Hub's CDN is another host, which clients do not follow
            # on HEAD: the other name of this one.
            host = self.headers.get("Host", "127.0.0.1")
            name, _, port = host.partition(":")
            cdn = "localhost" if name != "localhost" else "127.0.0.1"
            return self.answer(302, {
                "Location": f"http://{cdn}:{port}/cdn/{sha256}",
                "ETag": f'"{sha256}"',
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(size),
                "X-Repo-Commit": repo.sha,
            }, b"", head)
        with open(repo.path(path), "rb") as f:
            data = f.read()
        self.ranged(data, {"ETag": f'"{git}"', "X-Repo-Commit": repo.sha}, head, drop_key=None)

    def cdn(self, sha256, head):
        path = self.hub.blobs.get(sha256)
        if path is None:
            return self.error(404, "NotFound", "no such blob", head)
        with open(path, "rb") as f:
            data = f.read()
        if self.hub.corrupt and data:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        self.ranged(data, {"ETag": f'"{sha256}"'}, head, drop_key=sha256)

    def ranged(self, data, headers, head, drop_key):
        headers = dict(headers, **{"Accept-Ranges": "bytes",
                                   "Content-Type": "application/octet-stream"})
        spec = self.headers.get("Range")
        status, start, end = 200, 0, len(data) - 1
        if spec and spec.startswith("bytes="):
            a, _, b = spec[len("bytes="):].partition("-")
            start = int(a) if a else 0
            end = min(int(b), len(data) - 1) if b else len(data) - 1
            if start >= len(data) and len(data) > 0:
                headers["Content-Range"] = f"bytes */{len(data)}"
                return self.answer(416, headers, b"", head)
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        body = data[start:end + 1]
        limit = None
        if (drop_key is not None and not head and self.hub.drop_after is not None
                and len(body) > self.hub.drop_after):
            with self.hub.lock:
                if drop_key not in self.hub.dropped:
                    self.hub.dropped.add(drop_key)
                    limit = self.hub.drop_after
        self.answer(status, headers, body, head, sent_limit=limit)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log")
    ap.add_argument("--gated", action="append")
    ap.add_argument("--token")
    ap.add_argument("--drop-after", type=int)
    ap.add_argument("--corrupt", action="store_true")
    args = ap.parse_args()
    Handler.hub = Hub(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
