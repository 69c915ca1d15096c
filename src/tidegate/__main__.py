"""`python -m tidegate ...`: the same CLI as the `tidegate` command."""

from tidegate.cli.main import main

if __name__ == "__main__":
    main()
