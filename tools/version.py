#!/usr/bin/env python3
# Prints the version from the public header, the one place it is written.
import re
import sys

text = open(sys.argv[1], encoding='utf-8').read()
parts = [re.search(r'#define\s+KCACHE_VERSION_%s\s+(\d+)' % p, text).group(1)
         for p in ('MAJOR', 'MINOR', 'PATCH')]
print('.'.join(parts))
