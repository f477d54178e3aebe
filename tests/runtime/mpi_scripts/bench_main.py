"""Call ddl_runtime.bench.main(argv) the way `wml bench allreduce` does."""
import sys

from ddl_runtime.bench import main

sys.exit(main(sys.argv[1:]))
