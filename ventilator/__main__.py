from ventilator.cli import main

main()
