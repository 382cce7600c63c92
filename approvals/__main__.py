from approvals.cli import main

main()
