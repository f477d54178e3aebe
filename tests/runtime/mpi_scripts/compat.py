"""A WML CE style script: `import ddl` and use it with no explicit init."""
import sys

import ddl

part = ddl.shard(list(range(5)))
sys.stdout.write(f"compat rank={ddl.rank()} size={ddl.size()} local={ddl.local_rank()} shard={part}\n")
