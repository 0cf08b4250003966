"""`python -m autodist` is the `autodist` command."""
import sys

from autodist.cli import main

sys.exit(main())
