"""`python -m trainop.launcher`: the same as the `trainop-launch` command."""

from trainop.launcher.main import main

main()
