from sink.cli import main

main()
