from approvals.cli.main import main

main()
