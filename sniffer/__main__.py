import sys

from sniffer.daemon import main

sys.exit(main())
