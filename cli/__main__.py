from spectally.commands import main

main()
