import sys

from k3gen.cli import main

sys.exit(main())
