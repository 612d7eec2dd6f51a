from spectally.cli import main

main()
