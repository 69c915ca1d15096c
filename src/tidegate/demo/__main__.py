"""`python -m tidegate.demo [--runs N ...]`: the same as `tidegate demo`."""

import sys

from tidegate.cli.main import main

if __name__ == "__main__":
    main(["demo", *sys.argv[1:]], prog_name="python -m tidegate")
