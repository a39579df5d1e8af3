from collapipe_core.cli import main

main()
