#!/usr/bin/env python3
"""fetch.py URL OUTFILE [--code]: HTTP GET URL into OUTFILE (curl -o stand-in).

Used where curl itself may not run: under a sanitizer runtime preloaded
first (libasan makes curl hang in setlocale before main, with or without
librsock). With --code, prints "HTTP_CODE SIZE" like
curl -w '%{http_code} %{size_download}\\n'. Exit: 0, 7 (no connection) or 22."""
import sys
import urllib.error
import urllib.request

url, out = sys.argv[1], sys.argv[2]
try:
    with urllib.request.urlopen(url, timeout=25) as r:
        body = r.read()
        code = r.status
except urllib.error.HTTPError as e:
    print("fetch.py: HTTP %d" % e.code, file=sys.stderr)
    sys.exit(22)
except OSError as e:
    print("fetch.py: %s" % e, file=sys.stderr)
    sys.exit(7)
with open(out, "wb") as f:
    f.write(body)
if len(sys.argv) > 3 and sys.argv[3] == "--code":
    print("%d %d" % (code, len(body)))
