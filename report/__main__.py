from report.cli import main

main()
