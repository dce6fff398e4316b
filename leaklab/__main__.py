import sys

from leaklab.cli import main

sys.exit(main())
