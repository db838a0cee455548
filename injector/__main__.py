import sys

from injector.daemon import main

sys.exit(main())
