import os
import sys

# numpy's OpenBLAS starts a thread per core at import; the sniffer does no linear algebra, and
# fifty daemons starting at once on a shared machine would start a hundred idle threads
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from sniffer.daemon import main  # after the environment numpy reads at import

sys.exit(main())
